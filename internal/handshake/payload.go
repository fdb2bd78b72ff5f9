package handshake

import (
	"errors"
	"fmt"

	"github.com/gonixl/gonixl/descriptors"
)

// Rank is one rank's part of the payload.
type Rank struct {
	TPRank   int                `msgpack:"tp_rank"`
	Agent    string             `msgpack:"agent"`    // the NIXL agent's name
	Metadata []byte             `msgpack:"metadata"` // its LocalMD
	Layout   descriptors.Layout `msgpack:"layout"`
	// Incarnation identifies this publication of the rank: a random
	// non-zero number drawn each time the rank starts, so a peer can tell
	// a rank that restarted under the same engine id, address and agent
	// name from the instance it knew. Zero means the publisher does not
	// say (peers then cannot tell restarts apart).
	Incarnation uint64 `msgpack:"incarnation,omitempty"`
}

// Payload is everything a remote engine needs to transfer with this one.
type Payload struct {
	EngineID  string `msgpack:"engine_id"`
	Compat    Compat `msgpack:"compat"`
	Hash      string `msgpack:"hash"`
	TPSize    int    `msgpack:"tp_size"`
	PPSize    int    `msgpack:"pp_size"`
	BlockSize int    `msgpack:"block_size"` // tokens per block
	// Ranks holds one entry per TP rank, Ranks[i].TPRank == i.
	Ranks []Rank `msgpack:"ranks"`
}

// Validate reports the first inconsistency in a payload, naming the field:
// it reads bytes from the network, so nothing is trusted.
func (p *Payload) Validate() error {
	switch {
	case p.EngineID == "":
		return errors.New("handshake: payload engine_id is empty")
	case p.TPSize < 1:
		return fmt.Errorf("handshake: payload tp_size is %d, want >= 1", p.TPSize)
	case p.PPSize < 1:
		return fmt.Errorf("handshake: payload pp_size is %d, want >= 1", p.PPSize)
	case p.BlockSize < 1:
		return fmt.Errorf("handshake: payload block_size is %d, want >= 1", p.BlockSize)
	case len(p.Ranks) != p.TPSize:
		return fmt.Errorf("handshake: payload has %d ranks, tp_size is %d", len(p.Ranks), p.TPSize)
	}
	for i := range p.Ranks {
		r := &p.Ranks[i]
		switch {
		case r.TPRank != i:
			return fmt.Errorf("handshake: payload ranks[%d].tp_rank is %d", i, r.TPRank)
		case r.Agent == "":
			return fmt.Errorf("handshake: payload ranks[%d].agent is empty", i)
		case len(r.Metadata) == 0:
			return fmt.Errorf("handshake: payload ranks[%d].metadata is empty", i)
		case r.Layout.TPRank != i || r.Layout.TPSize != p.TPSize:
			return fmt.Errorf("handshake: payload ranks[%d].layout is rank %d of %d, want %d of %d", i, r.Layout.TPRank, r.Layout.TPSize, i, p.TPSize)
		case r.Layout.BlockTokens != p.BlockSize:
			return fmt.Errorf("handshake: payload ranks[%d].layout.block_tokens is %d, block_size is %d", i, r.Layout.BlockTokens, p.BlockSize)
		}
		if err := r.Layout.Validate(); err != nil {
			return fmt.Errorf("handshake: payload ranks[%d].layout: %w", i, err)
		}
	}
	return nil
}
