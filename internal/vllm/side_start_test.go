package vllm

import (
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Peers that connect and send bad bytes while the listener is still
// starting meet its accept loop before ListenSide has returned: the error
// path that names the listener's address must not race with ListenSide
// setting it (go test -race).
func TestSideConnectionsDuringStart(t *testing.T) {
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := probe.Addr().(*net.TCPAddr).Port
	require.NoError(t, probe.Close())

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), 100*time.Millisecond)
			if err != nil {
				continue
			}
			_, _ = c.Write([]byte("not ZMTP at all, not even its signature"))
			_ = c.Close()
		}
	}()
	var dropped int
	var mu sync.Mutex
	s, err := ListenSide("127.0.0.1", port, SideOptions{OnMalformed: func(error) { mu.Lock(); dropped++; mu.Unlock() }})
	require.NoError(t, err)
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return dropped > 0 }, 10*time.Second, time.Millisecond,
		"the bad connections are counted")
	close(stop)
	wg.Wait()
	require.Equal(t, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), s.Addr())
	require.NoError(t, s.Close())
}
