// Package twohost holds run.sh, which runs the reference serving stack on two
// "hosts" made of Linux network namespaces joined by a veth pair
// (10.200.0.1/30 and 10.200.0.2/30, addresses that exist only inside them):
// the prefill engine in one, the decode engine, the proxy and a short
// benchmark in the other, with the KV cache crossing the veth over NIXL's UCX
// (TCP transport) and LIBFABRIC (libfabric's tcp provider under ofi_rxm) backends. The package has
// no Go code of its own; its tests run the script (TestTwoHostScript, build
// tag nixl, as root with NIXL installed) and check its skips and usage errors.
// See README.md.
package twohost
