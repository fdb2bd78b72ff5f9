package gpue2e

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// afterTests holds clean-ups of fixtures shared by several benchmarks (peer
// processes, device memory), run once every test and benchmark is done.
var afterTests []func()

func TestMain(m *testing.M) {
	code := m.Run()
	for i := len(afterTests) - 1; i >= 0; i-- {
		afterTests[i]()
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
