package nixltest

// SetViaCAPI tells the suite that the agents under test are the binding
// over NIXL's C API (see viaCAPI).
func SetViaCAPI(on bool) { viaCAPI = on }
