package pd

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Bidirectional KV for multi-turn chats (Config.Bidirectional, pull,
// /v1/chat/completions; vLLM's bidirectional_kv_xfer). The decode leg asks
// the decode engine to hold the turn's prompt for the next turn
// (kv_history_export: true); decode answers the hold's Params as
// kv_transfer_params, in its whole answer or in a last stream chunk with no
// choices. The proxy remembers them under the conversation's key, with the
// two engines that served the turn. When a chat request continues a
// conversation it knows, the proxy sends the prefill leg to the same
// prefill engine with the Params as kv_history_params (so prefill reads
// the history back from decode instead of computing it) and the decode leg
// to the same decode engine, when both are still in rotation; else the
// turn goes where the pick puts it, and a prefill engine that cannot reach
// the history recomputes it.
//
// The conversation key is the SHA-256 of the messages up to and including
// the assistant's reply, each as its role and its text (content parts
// joined by newlines, as the engine reads them). A request continues a
// conversation when its messages up to some assistant message (the
// longest that is known) hash to a remembered key: what a client sends on
// its next turn, the earlier messages and the reply as it received them,
// then the new ones. Each remembered turn is used once (its hold ends with
// the read) and forgotten after Config.ConversationTTL.

// DefaultConversationTTL is how long the proxy remembers a turn's history:
// vLLM's decoder_kv_blocks_ttl, the decode engine's default hold.
const DefaultConversationTTL = 480 * time.Second

// maxConversations bounds the conversations remembered; the oldest go
// first.
const maxConversations = 1 << 16

// conversations are the turns whose history a decode engine holds.
type conversations struct {
	mu    sync.Mutex
	ttl   time.Duration
	turns map[[32]byte]*heldTurn
	order [][32]byte // insertion order, for the bound
}

// heldTurn is where a conversation's history is held.
type heldTurn struct {
	prefill, decode string // engine URLs of the turn
	params          json.RawMessage
	until           time.Time
}

func (cs *conversations) put(k [32]byte, t *heldTurn) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.turns == nil {
		cs.turns = map[[32]byte]*heldTurn{}
	}
	for len(cs.order) > 0 && (len(cs.turns) >= maxConversations || cs.turns[cs.order[0]] == nil) {
		delete(cs.turns, cs.order[0])
		cs.order = cs.order[1:]
	}
	cs.turns[k] = t
	cs.order = append(cs.order, k)
}

// take returns and forgets the held turn of key k, if it is still held.
func (cs *conversations) take(k [32]byte, now time.Time) *heldTurn {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	t := cs.turns[k]
	if t == nil {
		return nil
	}
	delete(cs.turns, k)
	if now.After(t.until) {
		return nil
	}
	return t
}

// chatMessage is a message as the key digests it.
type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// messageText is a message's content as text: a string, or text parts
// joined by newlines (the engine's reading); ok false for anything else.
func messageText(raw json.RawMessage) (string, bool) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, true
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return "", false
	}
	texts := make([]string, len(parts))
	for i, p := range parts {
		texts[i] = p.Text
	}
	return strings.Join(texts, "\n"), true
}

// prefixKeys returns the key of every prefix of msgs that ends with an
// assistant message, longest first, and the key msgs would have with
// reply appended (the key this turn's history is remembered under).
func prefixKeys(msgs []chatMessage, reply *string) (prefixes [][32]byte, next [32]byte, ok bool) {
	h := sha256.New()
	write := func(role, text string) {
		// Lengths first: no two message lists digest the same bytes.
		var n [16]byte
		putLen(n[:8], len(role))
		putLen(n[8:], len(text))
		h.Write(n[:])
		h.Write([]byte(role))
		h.Write([]byte(text))
	}
	for _, m := range msgs {
		text, good := messageText(m.Content)
		if !good {
			return nil, next, false
		}
		write(m.Role, text)
		if m.Role == "assistant" {
			var k [32]byte
			copy(k[:], h.Sum(nil))
			prefixes = append([][32]byte{k}, prefixes...)
		}
	}
	if reply != nil {
		write("assistant", *reply)
		copy(next[:], h.Sum(nil))
	}
	return prefixes, next, true
}

func putLen(b []byte, n int) {
	for i := range 8 {
		b[i] = byte(uint64(n) >> (8 * i))
	}
}

// historyRoute is a chat turn's part in bidirectional KV: where its
// history is held, and what its decode answer says (collected as it is
// relayed).
type historyRoute struct {
	cs              *conversations
	msgs            []chatMessage
	prefill, decode string // preferred engines ("" none)
	answer          bytes.Buffer
	stream          bool
	log             *zap.Logger
	// servedP and servedD are the engines of this turn; done: the turn is
	// remembered.
	servedP, servedD string
	done             bool
}

// maxObserved bounds the decode answer kept to learn the reply and the
// Params from.
const maxObserved = 4 << 20

// bidirChatRoute is chatRoute with bidirectional KV: the history the
// conversation has on a decode engine goes to the prefill leg, the decode
// leg asks for this turn to be held.
func (p *Proxy) bidirChatRoute(c *completion) pullRoute {
	if !p.cfg.Bidirectional {
		return chatRoute(c)
	}
	var msgs []chatMessage
	if json.Unmarshal(c.fields["messages"], &msgs) != nil {
		return chatRoute(c) // the engine answers the error
	}
	h := &historyRoute{cs: &p.convs, msgs: msgs, stream: c.stream, log: c.log}
	base := c
	if prefixes, _, ok := prefixKeys(msgs, nil); ok {
		now := time.Now()
		for _, k := range prefixes {
			if t := p.convs.take(k, now); t != nil {
				h.prefill, h.decode = t.prefill, t.decode
				base = c.with("kv_history_params", t.params)
				p.met.historyTurns.Inc()
				break
			}
		}
	}
	route := chatRoute(base)
	decode := route.decode
	route.decode = func(answer []byte) ([]byte, *legError) {
		body, le := decode(answer)
		if le != nil {
			return nil, le
		}
		var m map[string]json.RawMessage
		if json.Unmarshal(body, &m) != nil {
			return body, nil
		}
		m["kv_history_export"] = json.RawMessage("true")
		delete(m, "kv_history_params")
		out, err := json.Marshal(m)
		if err != nil {
			return body, nil
		}
		return out, nil
	}
	route.history = h
	return route
}

// watch makes c's relay of decode's answer, from the engines prefill and
// decode, go through observe.
func (h *historyRoute) watch(c *completion, prefill, decode string) {
	if h == nil {
		return
	}
	h.servedP, h.servedD = prefill, decode
	c.observe = h.observe
}

// observe keeps the decode answer's bytes as they are relayed, and
// remembers the turn once the answer is whole: before its last bytes go to
// the client, which may send the next turn as soon as it has them.
func (h *historyRoute) observe(b []byte) {
	if h.answer.Len()+len(b) <= maxObserved {
		h.answer.Write(b)
	}
	if !h.stream || bytes.Contains(b, []byte("data: [DONE]")) {
		h.finish(h.servedP, h.servedD)
	}
}

// finish remembers the turn's history, if decode held it, under the key
// the conversation's next turn will have.
func (h *historyRoute) finish(prefill, decode string) {
	if h.done {
		return
	}
	h.done = true
	reply, params := h.parse()
	if params == nil {
		return
	}
	_, next, good := prefixKeys(h.msgs, &reply)
	if !good {
		return
	}
	ttl := h.cs.ttl
	if ttl <= 0 {
		ttl = DefaultConversationTTL
	}
	h.cs.put(next, &heldTurn{prefill: prefill, decode: decode, params: params, until: time.Now().Add(ttl)})
	h.log.Debug("conversation turn held on decode", zap.String("decode", decode))
}

// parse reads the reply's text and the history Params from decode's
// answer: a chat.completion, or its stream of chunks.
func (h *historyRoute) parse() (string, json.RawMessage) {
	type chunk struct {
		Choices []struct {
			Message *struct {
				Content string `json:"content"`
			} `json:"message"`
			Delta *struct {
				Content *string `json:"content"`
			} `json:"delta"`
		} `json:"choices"`
		KV json.RawMessage `json:"kv_transfer_params"`
	}
	var text strings.Builder
	var params json.RawMessage
	take := func(b []byte) {
		var c chunk
		if json.Unmarshal(b, &c) != nil {
			return
		}
		for _, ch := range c.Choices {
			if ch.Message != nil {
				text.WriteString(ch.Message.Content)
			}
			if ch.Delta != nil && ch.Delta.Content != nil {
				text.WriteString(*ch.Delta.Content)
			}
		}
		if len(c.KV) > 0 && string(c.KV) != "null" {
			params = c.KV
		}
	}
	if !h.stream {
		take(h.answer.Bytes())
		return text.String(), params
	}
	sc := bufio.NewScanner(bytes.NewReader(h.answer.Bytes()))
	sc.Buffer(make([]byte, 64<<10), maxObserved)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if data, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			take(bytes.TrimSpace(data))
		}
	}
	return text.String(), params
}

func (h *historyRoute) prefillURL() string {
	if h == nil {
		return ""
	}
	return h.prefill
}

func (h *historyRoute) decodeURL() string {
	if h == nil {
		return ""
	}
	return h.decode
}

// pickPreferred is pick that takes the engine at url when it is
// acceptable, else any (url "": pick).
func (p *Proxy) pickPreferred(url string, pool []*engine, rr *atomic.Uint64, policy string, accept func(*engine) bool, exclude ...*engine) (*engine, func()) {
	if url != "" {
		if e, release := p.pick(pool, rr, policy, func(e *engine) bool { return e.url == url && accept(e) }, exclude...); e != nil {
			return e, release
		}
	}
	return p.pick(pool, rr, policy, accept, exclude...)
}
