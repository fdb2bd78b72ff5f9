// Package gpue2e holds gonixl's end-to-end tests and benchmarks on GPUs: the
// native NIXL binding and the pull and push connectors moving KV blocks that
// live in VRAM, within one process, between two processes on one GPU, and
// between processes on two GPUs. The tests themselves need the build tags
// `nixl` and `cuda` (NIXL and a CUDA driver at run time); what the package
// exports without them is the support those tests stand on and that is
// tested anywhere: a child process that runs the same test binary as a peer
// (the second process of a transfer) with a message channel to it, and a
// position-dependent byte pattern that shows any byte moved to the wrong
// place.
package gpue2e
