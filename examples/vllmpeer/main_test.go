package vllmpeer_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// atExit runs after every test (the process tests' built program).
var atExit []func()

// Every goroutine a peer, a gonixl engine or the reference engine starts
// ends with its Close.
func TestMain(m *testing.M) {
	code := m.Run()
	for _, f := range atExit {
		f()
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
