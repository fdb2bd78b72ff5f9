package pd

import (
	"encoding/json"

	"go.uber.org/zap"
	"testing"
	"time"
)

func msgs(t *testing.T, s string) []chatMessage {
	t.Helper()
	var m []chatMessage
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// The key a turn is remembered under is the one its next turn looks up:
// the messages so far and the reply as the client got it.
func TestConversationKeys(t *testing.T) {
	reply := "t1 t2 t3"
	_, next, ok := prefixKeys(msgs(t, `[{"role":"system","content":"be brief"},{"role":"user","content":"hello"}]`), &reply)
	if !ok {
		t.Fatal("not keyed")
	}
	turn2 := msgs(t, `[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hello"}]},{"role":"assistant","content":"t1 t2 t3"},{"role":"user","content":"more"}]`)
	prefixes, _, ok := prefixKeys(turn2, nil)
	if !ok || len(prefixes) != 1 || prefixes[0] != next {
		t.Fatalf("turn 2's prefixes %x do not start with turn 1's key %x", prefixes, next)
	}
	other := msgs(t, `[{"role":"system","content":"be brief"},{"role":"user","content":"hello"},{"role":"assistant","content":"t1 t2"},{"role":"user","content":"more"}]`)
	if p, _, _ := prefixKeys(other, nil); p[0] == next {
		t.Fatal("another reply gives the same key")
	}
	// Role and text boundaries are part of the key.
	a, _, _ := prefixKeys(msgs(t, `[{"role":"user","content":"ab"},{"role":"assistant","content":"c"}]`), nil)
	b, _, _ := prefixKeys(msgs(t, `[{"role":"user","content":"a"},{"role":"assistant","content":"bc"}]`), nil)
	if a[0] == b[0] {
		t.Fatal("message boundaries are not in the key")
	}
	if _, _, ok := prefixKeys(msgs(t, `[{"role":"user","content":5}]`), nil); ok {
		t.Fatal("a content that is not text was keyed")
	}
}

func TestConversationsTakeOnceAndExpire(t *testing.T) {
	var cs conversations
	now := time.Now()
	k1, k2 := [32]byte{1}, [32]byte{2}
	cs.put(k1, &heldTurn{decode: "d", until: now.Add(time.Minute)})
	cs.put(k2, &heldTurn{decode: "d", until: now.Add(-time.Second)})
	if cs.take(k1, now) == nil || cs.take(k1, now) != nil {
		t.Fatal("a held turn is taken exactly once")
	}
	if cs.take(k2, now) != nil {
		t.Fatal("an expired turn was taken")
	}
}

// parse reads the reply and the Params from a whole answer and a stream.
func TestHistoryParse(t *testing.T) {
	h := &historyRoute{cs: &conversations{}, log: zap.NewNop()}
	h.observe([]byte(`{"choices":[{"message":{"role":"assistant","content":"t1 t2"}}],"kv_transfer_params":{"remote_engine_id":"d"}}`))
	if text, p := h.parse(); text != "t1 t2" || string(p) != `{"remote_engine_id":"d"}` {
		t.Fatalf("whole: %q %s", text, p)
	}
	h = &historyRoute{cs: &conversations{}, log: zap.NewNop(), stream: true}
	h.observe([]byte("data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"t1\"}}]}\n\n"))
	h.observe([]byte("data: {\"choices\":[{\"delta\":{\"content\":\" t2\"}}]}\n\ndata: {\"choices\":[],\"kv_transfer_params\":{\"x\":1}}\n\ndata: [DONE]\n\n"))
	if text, p := h.parse(); text != "t1 t2" || string(p) != `{"x":1}` {
		t.Fatalf("stream: %q %s", text, p)
	}
	// Remembered at [DONE], before the client has it: under the key of the
	// messages (none here) and the reply.
	reply := "t1 t2"
	_, next, _ := prefixKeys(nil, &reply)
	if got := h.cs.take(next, time.Now()); got == nil || string(got.params) != `{"x":1}` {
		t.Fatalf("the turn was not remembered at [DONE]: %v", got)
	}
}

// Decode's answer and the client's messages are network bytes: parsing
// them never panics, and a stream's parse never invents Params.
func FuzzHistoryParse(f *testing.F) {
	f.Add([]byte(`{"choices":[{"message":{"content":"a"}}],"kv_transfer_params":{"x":1}}`), false)
	f.Add([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: [DONE]\n\n"), true)
	f.Add([]byte(`[{"role":"user","content":[{"type":"text","text":"a"}]},{"role":"assistant","content":"b"}]`), false)
	f.Fuzz(func(t *testing.T, b []byte, stream bool) {
		h := &historyRoute{cs: &conversations{}, log: zap.NewNop(), stream: stream}
		h.observe(b)
		_, params := h.parse()
		if params != nil && !json.Valid(params) {
			t.Fatalf("params %q are not JSON", params)
		}
		var m []chatMessage
		if json.Unmarshal(b, &m) == nil {
			text := "r"
			prefixKeys(m, &text)
		}
	})
}
