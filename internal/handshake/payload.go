package handshake

import (
	"errors"
	"fmt"
	"time"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/staging"
)

// Rank is one rank's part of the payload.
type Rank struct {
	TPRank int `msgpack:"tp_rank"`
	// PPRank is the rank's pipeline stage; omitted when 0, so a payload
	// without pipeline parallelism encodes as before.
	PPRank   int                `msgpack:"pp_rank,omitempty"`
	Agent    string             `msgpack:"agent"`    // the NIXL agent's name
	Metadata []byte             `msgpack:"metadata"` // its LocalMD
	Layout   descriptors.Layout `msgpack:"layout"`
	// Incarnation identifies this publication of the rank: a random
	// non-zero number drawn each time the rank starts, so a peer can tell
	// a rank that restarted under the same engine id, address and agent
	// name from the instance it knew. Zero means the publisher does not
	// say (peers then cannot tell restarts apart).
	Incarnation uint64 `msgpack:"incarnation,omitempty"`
	// Staging, when set, is the rank's registered staging memory (slots
	// for the staged transfer path); a peer writes into or reads from a
	// slot a message names only inside it.
	Staging *staging.Info `msgpack:"staging,omitempty"`
}

// Payload is everything a remote engine needs to transfer with this one.
type Payload struct {
	EngineID  string `msgpack:"engine_id"`
	Compat    Compat `msgpack:"compat"`
	Hash      string `msgpack:"hash"`
	TPSize    int    `msgpack:"tp_size"`
	PPSize    int    `msgpack:"pp_size"`
	BlockSize int    `msgpack:"block_size"` // tokens per block
	// Ranks holds one entry per rank, stage by stage: Ranks[i] is TP rank
	// i % TPSize of stage i / TPSize (descriptors.Layout.WorldRank).
	Ranks RankList `msgpack:"ranks"`
	// Confirms says the engine answers confirmations (Hello.Confirm): a
	// decode rank then asks it, as it posts its READs, to pin the hold they
	// read, and reports done only if the pin was granted and the READs
	// ended within it. A peer that does not say (older gonixl, vLLM) is read
	// on its deadline alone.
	Confirms bool `msgpack:"confirms,omitempty"`

	// ClockOffset is the client's estimate of the remote engine's clock
	// minus its own when it fetched the payload, and ClockUncertainty the
	// half round trip it cannot resolve: a remote time t is at most
	// t - ClockOffset + ClockUncertainty on the local clock. Neither travels.
	ClockOffset      time.Duration `msgpack:"-"`
	ClockUncertainty time.Duration `msgpack:"-"`
}

// MaxRanks bounds the ranks a payload may list, far above any TP size.
const MaxRanks = 1024

// RankList is a payload's ranks. Its decoder checks the count against
// MaxRanks before it allocates and grows the list only with ranks actually
// decoded: the generic decoder would allocate a Rank (hundreds of bytes) for
// each element an array header claims, one byte of input apiece.
type RankList []Rank

// DecodeMsgpack decodes the list within the bounds above.
func (rl *RankList) DecodeMsgpack(dec *msgpack.Decoder) error {
	n, err := dec.DecodeArrayLen()
	if err != nil {
		return fmt.Errorf("payload ranks: %w", err)
	}
	if n > MaxRanks {
		return fmt.Errorf("payload lists %d ranks, limit %d", n, MaxRanks)
	}
	if n <= 0 {
		*rl = nil
		return nil
	}
	out := make(RankList, 0, min(n, 16))
	for i := range n {
		if c, err := dec.PeekCode(); err != nil || !msgpcode.IsFixedMap(c) && c != msgpcode.Map16 && c != msgpcode.Map32 {
			return fmt.Errorf("payload ranks[%d] is not a map", i)
		}
		var r Rank
		if err := dec.Decode(&r); err != nil {
			return fmt.Errorf("payload ranks[%d]: %w", i, err)
		}
		out = append(out, r)
	}
	*rl = out
	return nil
}

// Validate reports the first inconsistency in a payload, naming the field:
// it reads bytes from the network, so nothing is trusted.
func (p *Payload) Validate() error {
	switch {
	case p.EngineID == "":
		return errors.New("payload engine_id is empty")
	case p.TPSize < 1:
		return fmt.Errorf("payload tp_size is %d, want >= 1", p.TPSize)
	case p.PPSize < 1:
		return fmt.Errorf("payload pp_size is %d, want >= 1", p.PPSize)
	case p.BlockSize < 1:
		return fmt.Errorf("payload block_size is %d, want >= 1", p.BlockSize)
	case p.PPSize > descriptors.MaxPPSize || p.TPSize > MaxRanks:
		return fmt.Errorf("payload tp_size %d x pp_size %d is above the limit of %d ranks", p.TPSize, p.PPSize, MaxRanks)
	case p.PPSize == 1 && len(p.Ranks) != p.TPSize:
		return fmt.Errorf("payload has %d ranks, tp_size is %d", len(p.Ranks), p.TPSize)
	case len(p.Ranks) != p.TPSize*p.PPSize:
		return fmt.Errorf("payload has %d ranks, tp_size %d x pp_size %d is %d", len(p.Ranks), p.TPSize, p.PPSize, p.TPSize*p.PPSize)
	}
	for i := range p.Ranks {
		r := &p.Ranks[i]
		switch {
		case r.TPRank != i%p.TPSize:
			return fmt.Errorf("payload ranks[%d].tp_rank is %d", i, r.TPRank)
		case r.PPRank != i/p.TPSize:
			return fmt.Errorf("payload ranks[%d].pp_rank is %d, want %d", i, r.PPRank, i/p.TPSize)
		case r.Layout.PPRank != r.PPRank || r.Layout.Stages() != p.PPSize:
			return fmt.Errorf("payload ranks[%d].layout is stage %d of %d, want %d of %d", i, r.Layout.PPRank, r.Layout.Stages(), r.PPRank, p.PPSize)
		case r.Agent == "":
			return fmt.Errorf("payload ranks[%d].agent is empty", i)
		case len(r.Metadata) == 0:
			return fmt.Errorf("payload ranks[%d].metadata is empty", i)
		case r.Layout.TPRank != r.TPRank || r.Layout.TPSize != p.TPSize:
			return fmt.Errorf("payload ranks[%d].layout is rank %d of %d, want %d of %d", i, r.Layout.TPRank, r.Layout.TPSize, r.TPRank, p.TPSize)
		case r.Layout.BlockSize != p.BlockSize:
			return fmt.Errorf("payload ranks[%d].layout.block_size is %d, block_size is %d", i, r.Layout.BlockSize, p.BlockSize)
		}
		if err := r.Layout.Validate(); err != nil {
			return fmt.Errorf("payload ranks[%d].layout: %w", i, err)
		}
		if st := r.Staging; st != nil && (st.Slots < 1 || st.Slots > staging.MaxSlots || st.SlotBytes == 0 || st.SlotBytes > (1<<62)/uint64(st.Slots) || st.Base > ^uint64(0)-st.SlotBytes*uint64(st.Slots)) {
			return fmt.Errorf("payload ranks[%d].staging: %d slots of %d bytes from %#x, want 1..%d slots inside the address space", i, st.Slots, st.SlotBytes, st.Base, staging.MaxSlots)
		}
	}
	return p.validateStages()
}
