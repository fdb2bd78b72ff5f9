package handshake

// Hello is what a client sends: who asks and what it is.
type Hello struct {
	EngineID string `msgpack:"engine_id"`
	Compat   Compat `msgpack:"compat"`
	Hash     string `msgpack:"hash"`
}

// Reply is the server's answer. Compat and Hash are always set, so a
// refused client can name both sides' values itself. Payload is set when
// the server accepts; otherwise Error says why, and Retry says whether
// asking again soon may succeed (the engine's ranks are still starting).
type Reply struct {
	Compat  Compat   `msgpack:"compat"`
	Hash    string   `msgpack:"hash"`
	Payload *Payload `msgpack:"payload,omitempty"`
	Error   string   `msgpack:"error,omitempty"`
	Retry   bool     `msgpack:"retry,omitempty"`
}
