//go:build nixl && nixlcxx

package nixl

// viaCAPI: the binding under test is shim.cc, over NIXL's C++ agent.
const viaCAPI = false
