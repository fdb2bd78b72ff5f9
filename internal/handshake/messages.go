package handshake

import (
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

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
	// Agent is the asking rank's NIXL agent name, in hold queries and
	// confirmations: prefill binds a hold to the decode engine that first
	// asks about it, and counts completions of a bound hold only from the
	// agents that asked.
	Agent string `msgpack:"agent,omitempty"`
	// Confirm, when set, makes the hello a confirmation instead of a
	// handshake: for each hold the server answers, in Reply.Verdicts,
	// whether every rank it names holds exactly that request for the asking
	// engine, and if so pins it there for HoldRef.PinMicros. At most
	// MaxConfirmHolds entries; not with Extend.
	Confirm HoldRefs `msgpack:"confirm,omitempty"`
	// Ready, when set, makes the hello a readiness query instead of a
	// handshake (see ReadyQuery), answered in Reply.Ready; not with Extend
	// or Confirm.
	Ready *ReadyQuery `msgpack:"ready,omitempty"`
}

// HoldRef names one hold a decode rank reads and asks prefill to pin.
type HoldRef struct {
	// ID is the request id on prefill (Params.RemoteRequestID).
	ID string `msgpack:"id"`
	// Key identifies the hold prefill made when the request finished: a
	// digest of its id, block ids, advertised deadline and staging slot,
	// so Params that name other blocks, a later hold of the same id, or
	// another slot do not match.
	Key uint64 `msgpack:"key"`
	// N is the decode engine's world size, as in a completion message.
	N int `msgpack:"n"`
	// PinMicros is how long, from when it answers, the server must keep
	// the hold whatever its lease says (its completions still release
	// it), in microseconds on its monotonic clock: decode asks as it posts
	// its READs and trusts them only if they ended within that time of
	// asking.
	PinMicros int64 `msgpack:"pin_us"`
	// Ranks are the prefill TP ranks this decode rank reads or notifies;
	// each must hold the request.
	Ranks RankNumbers `msgpack:"ranks"`
}

// MaxConfirmHolds bounds Hello.Confirm so that a confirmation fits the
// server's request frame whatever its ids and rank lists hold (see
// sidechannel.DefaultMaxRequestFrame): 512 x (1024 + 1024 x 3 + 32) bytes
// is about 2.1 MiB.
const MaxConfirmHolds = 512

// MaxConfirmRanks bounds HoldRef.Ranks, as MaxRanks bounds a payload.
const MaxConfirmRanks = MaxRanks

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
	// Verdicts answers Hello.Confirm, one entry per hold in its order: ""
	// where the hold is pinned, else why it is not (not held, other
	// blocks, held for another engine).
	Verdicts []string `msgpack:"verdicts,omitempty"`
	// Ready answers Hello.Ready, one state per rank in its order.
	Ready []int64 `msgpack:"ready,omitempty"`
}

// HoldRefs is a confirmation's holds. Its decoder checks the count against
// MaxConfirmHolds before it allocates and grows the list only with holds
// actually decoded: the generic decoder would allocate a HoldRef (56 bytes)
// for each element an array header claims, one byte of input apiece.
type HoldRefs []HoldRef

// DecodeMsgpack decodes the list within the bounds above.
func (hs *HoldRefs) DecodeMsgpack(dec *msgpack.Decoder) error {
	n, err := dec.DecodeArrayLen()
	if err != nil {
		return fmt.Errorf("confirmation holds: %w", err)
	}
	if n > MaxConfirmHolds {
		return fmt.Errorf("confirmation lists %d holds, limit %d", n, MaxConfirmHolds)
	}
	if n <= 0 {
		*hs = nil
		return nil
	}
	out := make(HoldRefs, 0, min(n, 16))
	for i := range n {
		if c, err := dec.PeekCode(); err != nil || !msgpcode.IsFixedMap(c) && c != msgpcode.Map16 && c != msgpcode.Map32 {
			return fmt.Errorf("confirmation holds[%d] is not a map", i)
		}
		var h HoldRef
		if err := dec.Decode(&h); err != nil {
			return fmt.Errorf("confirmation holds[%d]: %w", i, err)
		}
		out = append(out, h)
	}
	*hs = out
	return nil
}

// RankNumbers is a hold's prefill ranks, decoded within MaxConfirmRanks
// for the same reason as HoldRefs (8 bytes per claimed int otherwise).
type RankNumbers []int

// DecodeMsgpack decodes the list within the bound above.
func (rn *RankNumbers) DecodeMsgpack(dec *msgpack.Decoder) error {
	n, err := dec.DecodeArrayLen()
	if err != nil {
		return fmt.Errorf("hold ranks: %w", err)
	}
	if n > MaxConfirmRanks {
		return fmt.Errorf("hold names %d ranks, limit %d", n, MaxConfirmRanks)
	}
	if n <= 0 {
		*rn = nil
		return nil
	}
	out := make(RankNumbers, 0, min(n, 16))
	for i := range n {
		v, err := dec.DecodeInt()
		if err != nil {
			return fmt.Errorf("hold ranks[%d]: %w", i, err)
		}
		out = append(out, v)
	}
	*rn = out
	return nil
}
