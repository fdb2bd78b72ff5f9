package nixltest_test

import (
	"fmt"
	"testing"

	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
	"github.com/gonixl/gonixl/nixl/nixltest"
)

// An Agent implementation passes the suite from its own test (loopback's
// is in nixl/loopback/loopback_test.go): a factory makes agents that can
// reach each other.
func ExampleRunAgentSuite() {
	var t *testing.T // the implementation's test
	if t == nil {
		return // shown, not run: RunAgentSuite needs a real test
	}
	fab, _ := loopback.NewFabric()
	t.Cleanup(func() { fab.Close() })
	nixltest.RunAgentSuite(t, func(t *testing.T, name string) nixl.Agent {
		a, err := fab.NewAgent(name)
		if err != nil {
			t.Fatal(err)
		}
		return a
	})
}

// The behaviours the suite checks, as subtest names.
func ExampleCases() {
	fmt.Println(len(nixltest.Cases()), nixltest.Cases()[0], nixltest.Cases()[3])
	// Output: 18 Registration Write
}
