package pushconn

import (
	"fmt"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/handshake"
)

// Pipeline-parallel prefill. A prefill engine of PP size n runs a Producer
// per TP rank of every stage; each stage's Layout holds that stage's layers
// (descriptors.Geometry.StageLayout). Each Producer writes its own layers
// into the decode rank's matching regions (descriptors maps a stage onto
// the same model layers of a whole layout) and notifies "<id>:<TP>" as
// vLLM's does (its world size is the TP group's; a vLLM decode reads the
// number as prefill's TP size), so a decode rank counts one completion per
// writing rank of every stage: n x len(descriptors.Sources) of them,
// vLLM's pp_size * max(1, P_tp / D_tp) too. Decode is never
// pipeline-parallel.

// checkStageRank refuses what a rank of a pipeline stage cannot do: be a
// decode rank, or stage its transfers (a staged image is a whole rank's
// blocks).
func checkStageRank(cfg *Config, prefill bool) error {
	l := &cfg.Layout
	switch {
	case l.Stages() == 1:
		return nil
	case !prefill:
		return invalidf("RankConfig.Layout.PPSize is %d: a decode rank (Consumer) holds every layer; pipeline-parallel decode is not supported", l.PPSize)
	case cfg.Staging.Mode != connector.StagingOff:
		return invalidf("RankConfig.Staging.Mode is %q with RankConfig.Layout.PPSize %d: staging a pipeline stage's transfers is not supported", cfg.Staging.Mode, l.PPSize)
	}
	return nil
}

// stageSources returns the world ranks (descriptors.Layout.WorldRank) of
// the prefill ranks that write into decode layout dst, stage after stage:
// in every stage, the TP ranks descriptors.Sources names. The payload's
// stages were checked to cover the model once (handshake.Payload.Validate),
// so together these ranks write every layer of dst exactly once.
func stageSources(engineID string, pl *handshake.Payload, dst *descriptors.Layout) ([]int, error) {
	var out []int
	for s := range pl.PPSize {
		src := &pl.Ranks[s*pl.TPSize].Layout
		where := ""
		if pl.PPSize > 1 {
			where = fmt.Sprintf(" (pipeline stage %d, layers %d..%d)", s, src.FirstLayer, src.FirstLayer+src.NumLayers-1)
		}
		if err := descriptors.Compatible(src, dst); err != nil {
			return nil, fmt.Errorf("%w: prefill engine %q%s cannot write into this rank: %v", connector.ErrIncompatible, engineID, where, err)
		}
		ranks, err := descriptors.Sources(src, dst)
		if err != nil {
			return nil, fmt.Errorf("%w: prefill engine %q%s: %v", connector.ErrIncompatible, engineID, where, err)
		}
		for _, r := range ranks {
			out = append(out, s*pl.TPSize+r)
		}
	}
	return out, nil
}
