package handshake

// Hello is what a client sends: who asks and what it is.
type Hello struct {
	EngineID string `msgpack:"engine_id"`
	Compat   Compat `msgpack:"compat"`
	Hash     string `msgpack:"hash"`
	// Extend, when set, makes the hello a hold query instead of a
	// handshake: the server extends its holds of these request ids (as a
	// heartbeat does) and answers their deadlines in Reply.Holds, with no
	// payload. At most MaxExtendIDs ids of 1..notif.MaxIDLen bytes.
	Extend []string `msgpack:"extend,omitempty"`
}

// MaxExtendIDs bounds Hello.Extend.
const MaxExtendIDs = 4096

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
	// Now is the server's clock when it answered, in Unix nanoseconds; the
	// client estimates the clock offset between the engines from it (pull
	// decode compares prefill's hold deadlines with its own clock). Zero
	// means the server does not say.
	Now int64 `msgpack:"now,omitempty"`
	// Holds answers Hello.Extend, one entry per id in its order: the time
	// until which every rank of the engine now holds the request's blocks,
	// in Unix nanoseconds on the server's clock, or 0 where some rank does
	// not hold it.
	Holds []int64 `msgpack:"holds,omitempty"`
}
