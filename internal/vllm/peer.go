package vllm

import (
	"context"
	"fmt"
	"time"

	"github.com/gonixl/gonixl/descriptors"
)

// Peer is what a vLLM engine's side channel told of the ranks asked: each
// rank's layout and agent metadata, and the clock offset of the handshake.
type Peer struct {
	EngineID string
	// Ranks holds the ranks asked, in the order asked.
	Ranks []PeerRank
	// Offset is the peer's side-channel clock minus ours, in seconds, from
	// the lowest round trip (a peer time t is about t - Offset on our
	// clock, give or take RTT/2).
	Offset float64
	RTT    time.Duration
}

// PeerRank is one rank of a Peer.
type PeerRank struct {
	TPRank int
	// Layout is the rank's KV cache in the model's geometry (LayoutOf).
	Layout descriptors.Layout
	// AgentMetadata is the rank's NIXL agent metadata, to load into an
	// agent; AttnBackend the attention backend it names.
	AgentMetadata []byte
	AttnBackend   string
}

// FetchPeer asks the side channel of vLLM engine engineID at host:port,
// which runs tpSize TP ranks (pipeline stage 0), for ranks, and maps each
// rank's metadata, decoded as w.Version's, to a layout of model g. The
// payloads must carry hash (the local engine's compatibility hash) and
// name engineID: a mismatch is an error matching ErrIncompatible that
// names both values, as vLLM's own handshake refuses it. From version 16
// the peer's regions pair with the model's layers by name (PairByLayer,
// w.LayerNames naming the local layers). Metadata gonixl cannot move
// gives an error matching ErrUnsupported.
func FetchPeer(ctx context.Context, host string, port int, engineID, hash string, w Wire, g descriptors.Geometry, tpSize int, ranks []int, opts SideFetchOptions) (*Peer, error) {
	if err := w.Version.Check(); err != nil {
		return nil, err
	}
	var names []string
	var groups []int
	if w.Version.PairsByLayer() {
		groups = geometryLayerGroups(g)
		var err error
		if names, err = w.names(len(groups)); err != nil {
			return nil, err
		}
	}
	asks := make([]SideRank, len(ranks))
	for i, r := range ranks {
		asks[i] = SideRank{PP: 0, TP: r}
	}
	h, err := FetchRanks(ctx, host, port, asks, opts)
	if err != nil {
		return nil, err
	}
	p := &Peer{EngineID: engineID, Offset: h.Offset(), RTT: h.Replies[h.Best].RTT()}
	for i, rep := range h.Replies {
		m, err := peerMetadata(rep.Payload, hash, w.Version)
		if err != nil {
			return nil, fmt.Errorf("engine %q rank %d: %w", engineID, ranks[i], err)
		}
		if m.EngineID != engineID {
			return nil, fmt.Errorf("%w: engine %q rank %d: the metadata names engine %q", ErrIncompatible, engineID, ranks[i], m.EngineID)
		}
		if names != nil {
			if m, err = PairByLayer(m, names, groups); err != nil {
				return nil, fmt.Errorf("rank %d: %w", ranks[i], err)
			}
		}
		l, err := LayoutOf(m, g, ranks[i], tpSize)
		if err != nil {
			return nil, err
		}
		p.Ranks = append(p.Ranks, PeerRank{TPRank: ranks[i], Layout: l, AgentMetadata: m.AgentMetadata, AttnBackend: m.AttnBackendName})
	}
	return p, nil
}

// peerMetadata decodes a handshake payload in vLLM's two steps: the hash
// first, the agent metadata only when it matches.
func peerMetadata(payload []byte, hash string, v Version) (*AgentMetadata, error) {
	hp, err := DecodeHandshakePayload(payload)
	if err != nil {
		return nil, err
	}
	return hp.Metadata(hash, v)
}

// PublishRank serves rank l of engine engineID on s as a vLLM engine of
// version w.Version would: its metadata (MetadataOf) in a handshake
// payload that carries hash, for pipeline stage 0. From version 13 the
// metadata lists each region's layers (region_members) by w.LayerNames,
// and from 16 each layer's KV-cache group (layer_group_ids).
func PublishRank(s *SideServer, engineID, hash string, w Wire, l descriptors.Layout, agentMD []byte, attnBackend, kvLayout string) error {
	if err := w.Version.Check(); err != nil {
		return err
	}
	m, err := MetadataOf(l, engineID, agentMD, attnBackend, kvLayout)
	if err != nil {
		return err
	}
	if w.Version.PublishesMembers() {
		region, _ := layerRegions(&l)
		names, err := w.names(len(region))
		if err != nil {
			return err
		}
		if err := setMembers(m, &l, names, w.Version); err != nil {
			return err
		}
	}
	if err := m.Validate(); err != nil {
		return err
	}
	p := HandshakePayload{CompatibilityHash: hash, AgentMetadataBytes: m.Encode(w.Version)}
	s.SetPayload(0, l.TPRank, p.Encode())
	return nil
}
