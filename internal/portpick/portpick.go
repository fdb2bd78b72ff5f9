// Package portpick picks loopback TCP ports for a listener that binds them
// later, usually in a child process (vLLM's side channel, etcd, a NIXL
// agent's listener thread).
//
// The usual trick, listening on port 0 and closing, hands out a port from
// the kernel's ephemeral range: between the close and the child's bind any
// outgoing connection on the machine may take it as its source port, and
// on a busy machine one did (CI: vLLM's handshake listener failed with
// "Address already in use"). Ports below the ephemeral range are never
// handed out implicitly, so only another explicit bind can take one.
package portpick

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// lowest is the lowest port Pick returns: clear of the registered ports
// that services on a developer's machine commonly hold.
const lowest = 10000

// defaultEphemeralLow is Linux's default start of the ephemeral range, used
// where /proc does not say.
const defaultEphemeralLow = 32768

// rangeFile is where Linux keeps the ephemeral range ("low high").
var rangeFile = "/proc/sys/net/ipv4/ip_local_port_range"

// Pick returns a TCP port on 127.0.0.1 that nothing listens on now and that
// the kernel does not hand out on its own: a random one between 10000 and
// the start of the ephemeral range. Where that range starts too low to
// leave room, it falls back to a port the kernel picks.
func Pick() (int, error) {
	high := ephemeralLow()
	if high-lowest < 1000 {
		return kernelPort()
	}
	var lastErr error
	for range 200 {
		p := lowest + rand.IntN(high-lowest)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			lastErr = err
			continue
		}
		l.Close()
		return p, nil
	}
	return 0, fmt.Errorf("portpick: no free port below %d after 200 tries: %w", high, lastErr)
}

// ephemeralLow is the first port of the kernel's ephemeral range.
func ephemeralLow() int {
	b, err := os.ReadFile(rangeFile)
	if err != nil {
		return defaultEphemeralLow
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return defaultEphemeralLow
	}
	low, err := strconv.Atoi(f[0])
	if err != nil || low <= 0 || low > 65535 {
		return defaultEphemeralLow
	}
	return low
}

func kernelPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("portpick: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
