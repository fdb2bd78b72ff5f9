package nixl

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// afterTests holds clean-ups of package-level test fixtures, run once all
// tests and benchmarks are done.
var afterTests []func()

func TestMain(m *testing.M) {
	code := m.Run()
	for _, f := range afterTests {
		f()
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
