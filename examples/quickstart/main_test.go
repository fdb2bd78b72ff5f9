package main

import (
	"testing"

	"go.uber.org/goleak"
)

// The quick start runs as the README shows it and leaves no goroutine.
func Example() {
	main()
	// Output:
	// decode: req-1 done, err=<nil>
	// prefill: free [req-1]
	// decode block 5 starts with "KV of request 1"
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
