//go:build nixl

package nixltest_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/nixltest"
)

func TestMain(m *testing.M) {
	// UCX over loopback only, as everywhere in this project's tests.
	if _, set := os.LookupEnv("UCX_NET_DEVICES"); !set {
		os.Setenv("UCX_NET_DEVICES", "lo")
	}
	nixltest.SetViaCAPI(viaCAPI)
	goleak.VerifyTestMain(m)
}

// nativeUCX makes native agents with a UCX backend and no progress thread:
// the suite's waits progress every agent of a test.
func nativeUCX(params map[string]string) nixltest.Factory {
	return func(t *testing.T, name string) nixl.Agent {
		t.Helper()
		a, err := nixl.New(name, nixl.Config{})
		if err != nil {
			t.Fatalf("nixl.New(%q): %v", name, err)
		}
		if err := a.CreateBackend("UCX", params); err != nil {
			a.Close()
			t.Fatalf("%s: CreateBackend(UCX): %v", name, err)
		}
		return a
	}
}

// TestNativeAgentSuite runs the conformance suite on the real NIXL agent:
// two (or three) agents in one process, UCX on DRAM, with UCX's defaults
// (TCP over lo) and with shared memory.
func TestNativeAgentSuite(t *testing.T) {
	t.Run("UCX", func(t *testing.T) { nixltest.RunAgentSuite(t, nativeUCX(nil)) })
	t.Run("UCXSharedMemory", func(t *testing.T) {
		nixltest.RunAgentSuite(t, nativeUCX(map[string]string{"ucx_error_handling_mode": "none"}))
	})
}
