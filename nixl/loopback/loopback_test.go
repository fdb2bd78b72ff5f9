package loopback_test

import (
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
	"github.com/gonixl/gonixl/nixl/nixltest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// factory makes loopback agents, one fabric per test, closed at its end.
func factory(opts ...loopback.FabricOption) nixltest.Factory {
	var mu sync.Mutex
	fabrics := map[*testing.T]*loopback.Fabric{}
	return func(t *testing.T, name string) nixl.Agent {
		mu.Lock()
		f := fabrics[t]
		if f == nil {
			var err error
			if f, err = loopback.NewFabric(opts...); err != nil {
				mu.Unlock()
				t.Fatalf("NewFabric: %v", err)
			}
			fabrics[t] = f
			t.Cleanup(func() {
				f.Close()
				mu.Lock()
				delete(fabrics, t)
				mu.Unlock()
			})
		}
		mu.Unlock()
		a, err := f.NewAgent(name)
		if err != nil {
			t.Fatalf("NewAgent(%q): %v", name, err)
		}
		return a
	}
}

func TestAgentSuite(t *testing.T) {
	t.Run("Instant", func(t *testing.T) { nixltest.RunAgentSuite(t, factory()) })
	t.Run("FixedLatency", func(t *testing.T) {
		nixltest.RunAgentSuite(t, factory(loopback.WithModel(loopback.FixedLatency(20*time.Microsecond))))
	})
	t.Run("Bandwidth", func(t *testing.T) {
		nixltest.RunAgentSuite(t, factory(loopback.WithModel(loopback.Bandwidth(8e9, 5*time.Microsecond))))
	})
}
