//go:build nixl && nixlcxx

package nixltest_test

// viaCAPI: the native agent is the binding over NIXL's C++ agent.
const viaCAPI = false
