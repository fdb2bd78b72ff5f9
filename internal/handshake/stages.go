package handshake

import (
	"fmt"

	"github.com/gonixl/gonixl/descriptors"
)

// validateStages checks that a payload's pipeline stages make up one
// model: every TP rank of a stage holds the stage's layers, and the stages
// cover the model's layers in order, each exactly once
// (descriptors.CheckStages). A decode rank counts one completion per
// writing rank of every stage as the whole request, so a gap (layers no
// rank writes) or an overlap would be a done result over wrong bytes. A
// payload without pipeline parallelism passes as before.
func (p *Payload) validateStages() error {
	if p.PPSize == 1 {
		return nil
	}
	first := make([]*descriptors.Layout, p.PPSize)
	for i := range p.Ranks {
		l := &p.Ranks[i].Layout
		s := p.Ranks[i].PPRank
		if first[s] == nil {
			first[s] = l
			continue
		}
		if f := first[s]; l.FirstLayer != f.FirstLayer || l.NumLayers != f.NumLayers || l.TotalLayers() != f.TotalLayers() {
			return fmt.Errorf("payload ranks[%d].layout holds layers [%d, %d) of %d, stage %d's first rank [%d, %d) of %d",
				i, l.FirstLayer, l.FirstLayer+l.NumLayers, l.TotalLayers(), s, f.FirstLayer, f.FirstLayer+f.NumLayers, f.TotalLayers())
		}
	}
	if err := descriptors.CheckStages(first); err != nil {
		return fmt.Errorf("payload stages: %w", err)
	}
	return nil
}
