package nixl

import (
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// cList builds what the C shim lists for (sender, message) pairs: entries
// pointing into one buffer (standing for the C++ map's strings, which the
// next call overwrites), a sender's entries sharing its name's bytes. It
// returns the entries and the buffer.
func cList(pairs ...string) ([]notifRef, []byte) {
	size := 0
	for _, p := range pairs {
		size += len(p)
	}
	mem := make([]byte, 0, size)
	put := func(s string) (*byte, uintptr) {
		if s == "" {
			return nil, 0
		}
		mem = append(mem, s...)
		return &mem[len(mem)-len(s)], uintptr(len(s))
	}
	var refs []notifRef
	names := map[string]notifRef{}
	for i := 0; i < len(pairs); i += 2 {
		n, ok := names[pairs[i]]
		if !ok {
			n.from, n.fromLen = put(pairs[i])
			names[pairs[i]] = n
		}
		r := notifRef{from: n.from, fromLen: n.fromLen}
		r.msg, r.msgLen = put(pairs[i+1])
		refs = append(refs, r)
	}
	return refs, mem
}

func TestAppendNotifsGroupsBySender(t *testing.T) {
	refs, _ := cList("prefill-0", "req-1:2", "prefill-0", "", "prefill-1", "req-1:2")
	var d notifDecoder
	got := appendNotifs(nil, refs, &d)
	assert.Equal(t, Notifs{
		"prefill-0": {[]byte("req-1:2"), []byte("")},
		"prefill-1": {[]byte("req-1:2")},
	}, got)
	assert.Equal(t, 3, got.Count())
	assert.Nil(t, appendNotifs(nil, nil, &d), "nothing listed, no map made")
}

func TestAppendNotifsReusesTheCallersMap(t *testing.T) {
	dst := Notifs{"prefill-0": make([][]byte, 1, 8)}
	dst["prefill-0"][0] = []byte("earlier")
	arr := &dst["prefill-0"][:1][0]
	refs, _ := cList("prefill-0", "later", "prefill-1", "x")
	var d notifDecoder
	got := appendNotifs(dst, refs, &d)
	assert.Equal(t, Notifs{"prefill-0": {[]byte("earlier"), []byte("later")}, "prefill-1": {[]byte("x")}}, got)
	assert.Same(t, arr, &dst["prefill-0"][0], "the existing slice's array is reused")
	got["prefill-0"] = got["prefill-0"][:0]
	got = appendNotifs(got, nil, &d)
	assert.Empty(t, got["prefill-0"])
}

func TestNotifDecoderCopiesMessagesOutOfCMemory(t *testing.T) {
	big := strings.Repeat("b", slabMaxMsg+1)
	refs, mem := cList("prefill-0", "m1", "prefill-0", "", "prefill-0", "m3", "prefill-0", big)
	var d notifDecoder
	got := appendNotifs(nil, refs, &d)
	want := Notifs{"prefill-0": {[]byte("m1"), []byte{}, []byte("m3"), []byte(big)}}
	require.Equal(t, want, got)

	// The next call overwrites the C memory: nothing may alias it.
	for i := range mem {
		mem[i] = 0xff
	}
	assert.Equal(t, want, got, "messages and names survive the C memory being overwritten")

	// Messages share a block but never each other's bytes.
	m := got["prefill-0"]
	assert.Equal(t, len(m[0]), cap(m[0]))
	_ = append(m[0], 'X')
	assert.Equal(t, []byte("m3"), m[2], "appending to one message leaves the next intact")
	assert.NotNil(t, m[1], "an empty message is empty, not nil")
}

func TestEachNotifInOrder(t *testing.T) {
	refs, mem := cList("a", "1", "a", "2", "b", "3")
	var d notifDecoder
	var got []string
	var msgs [][]byte
	eachNotif(refs, &d, func(from string, msg []byte) {
		got = append(got, from+":"+string(msg))
		msgs = append(msgs, msg)
	})
	clear(mem)
	assert.Equal(t, []string{"a:1", "a:2", "b:3"}, got)
	assert.Equal(t, [][]byte{[]byte("1"), []byte("2"), []byte("3")}, msgs, "the messages are copies")
}

func TestNotifDecoderInternsSenders(t *testing.T) {
	var d notifDecoder
	refs, _ := cList("prefill-0", "a", "prefill-1", "b")
	var first, second []string
	eachNotif(refs, &d, func(from string, _ []byte) { first = append(first, from) })
	refs, _ = cList("prefill-0", "a", "prefill-1", "b")
	eachNotif(refs, &d, func(from string, _ []byte) { second = append(second, from) })
	require.Equal(t, first, second)
	for i := range first {
		assert.Equal(t, unsafe.StringData(first[i]), unsafe.StringData(second[i]), "sender %q is the same string each call", first[i])
	}
	assert.Len(t, d.names, 2)
}

// TestNotifDecoderReceivesWithoutAllocating is the native agent's
// notification hot path in pure Go: a delivery appended to a reused map
// whose lists the poller truncates, or handed to a function, costs no
// allocation of its own (a message block is shared by about
// slabSize/len(msg) deliveries).
func TestNotifDecoderReceivesWithoutAllocating(t *testing.T) {
	refs, _ := cList("cbench.init", "rt")
	var d notifDecoder
	inbox := Notifs{}
	received := 0
	allocs := testing.AllocsPerRun(1000, func() {
		n := appendNotifs(inbox, refs, &d)
		m := n["cbench.init"]
		if len(m) != 1 || string(m[0]) != "rt" {
			t.Fatalf("got %q", m)
		}
		received += len(m)
		n["cbench.init"] = m[:0]
	})
	assert.Zero(t, allocs, "appendNotifs")
	assert.Equal(t, 1001, received)

	count := func(string, []byte) { received++ }
	allocs = testing.AllocsPerRun(1000, func() { eachNotif(refs, &d, count) })
	assert.Zero(t, allocs, "eachNotif")
	assert.Equal(t, 2002, received)
}
