//go:build nixl && !nixlcxx

package nixl

// viaCAPI: the binding under test is capi.c, over NIXL's C API.
const viaCAPI = true
