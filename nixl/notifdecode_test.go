package nixl

import (
	"bytes"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNotifDecoderCopiesMessagesOutOfTheBuffer(t *testing.T) {
	big := strings.Repeat("b", slabMaxMsg+1)
	b := shimBuf{}.u64(1).str("prefill-0").u64(4).str("m1").str("").str("m3").str(big)
	var d notifDecoder
	got, err := appendNotifs(nil, b, &d)
	require.NoError(t, err)
	want := Notifs{"prefill-0": {[]byte("m1"), []byte{}, []byte("m3"), []byte(big)}}
	assert.Equal(t, want, got)

	// The buffer is C memory the next call overwrites: nothing may alias it.
	for i := range b {
		b[i] = 0xff
	}
	assert.Equal(t, want, got, "messages survive the buffer being overwritten")

	// Messages share a block but never each other's bytes.
	m := got["prefill-0"]
	assert.Equal(t, len(m[0]), cap(m[0]))
	_ = append(m[0], 'X')
	assert.Equal(t, []byte("m3"), m[2], "appending to one message leaves the next intact")
	assert.NotNil(t, m[1], "an empty message is empty, not nil")
}

func TestNotifDecoderInternsSenders(t *testing.T) {
	var d notifDecoder
	b := shimBuf{}.u64(2).str("prefill-0").u64(1).str("a").str("prefill-1").u64(1).str("b")
	first, err := appendNotifs(nil, b, &d)
	require.NoError(t, err)
	second, err := appendNotifs(nil, b, &d)
	require.NoError(t, err)
	for name := range first {
		var again string
		for n := range second {
			if n == name {
				again = n
			}
		}
		assert.Equal(t, unsafe.StringData(name), unsafe.StringData(again), "sender %q is the same string each call", name)
	}
	assert.Len(t, d.names, 2)
}

// TestNotifDecoderReceivesWithoutAllocating is the native agent's
// notification hot path in pure Go: a delivery decoded into a reused map
// whose lists the poller truncates costs no allocation of its own (the
// message blocks are shared by about slabSize/len(msg) deliveries).
func TestNotifDecoderReceivesWithoutAllocating(t *testing.T) {
	b := shimBuf{}.u64(1).str("cbench.init").u64(1).str("rt")
	var d notifDecoder
	inbox := Notifs{}
	received := 0
	allocs := testing.AllocsPerRun(1000, func() {
		n, err := appendNotifs(inbox, b, &d)
		if err != nil {
			t.Fatal(err)
		}
		m := n["cbench.init"]
		if len(m) != 1 || !bytes.Equal(m[0], []byte("rt")) {
			t.Fatalf("got %q", m)
		}
		received += len(m)
		n["cbench.init"] = m[:0]
	})
	assert.Zero(t, allocs)
	assert.Equal(t, 1001, received)
}
