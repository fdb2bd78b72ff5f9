package descriptors

import "github.com/gonixl/gonixl/nixl"

// validateStages checks Geometry.PPSize against the layers and groups.
func (g Geometry) validateStages() error {
	switch {
	case g.PPSize < 0:
		return invalidf("Geometry.PPSize is %d, want >= 0 (0 or 1: no pipeline parallelism)", g.PPSize)
	case g.PPSize > g.Layers:
		return invalidf("Geometry.PPSize is %d, want <= Layers %d: every stage holds at least one layer", g.PPSize, g.Layers)
	case g.PPSize > 1 && len(g.groups()) > 0:
		return invalidf("Geometry.PPSize is %d with %d KV-cache groups: a pipeline stage of a model of several groups is not supported", g.PPSize, len(g.groups()))
	}
	return nil
}

// StageLayers returns the model layers [first, first+n) that pipeline
// stage ppRank holds: the Layers split as evenly as they go, the earlier
// stages holding one layer more when PPSize does not divide Layers (10
// layers in 4 stages: 3, 3, 2, 2). Without pipeline parallelism stage 0
// holds every layer. Layouts built elsewhere may split the layers another
// way (vLLM lets a deployment choose); [Geometry.Check] accepts any
// contiguous range, and a decode rank checks with [CheckStages] that a
// prefill engine's stages cover the model. The error matches ErrInvalid.
func (g Geometry) StageLayers(ppRank int) (first, n int, err error) {
	if err := g.Validate(); err != nil {
		return 0, 0, err
	}
	pp := max(g.PPSize, 1)
	if ppRank < 0 || ppRank >= pp {
		return 0, 0, invalidf("ppRank is %d, want in [0, %d) (PPSize)", ppRank, pp)
	}
	base, extra := g.Layers/pp, g.Layers%pp
	first = ppRank*base + min(ppRank, extra)
	n = base
	if ppRank < extra {
		n++
	}
	return first, n, nil
}

// stageGeometry returns the geometry of a stage of n layers: g with Layers
// n and no pipeline parallelism, whose layouts are a stage's but for the
// stage fields.
func (g Geometry) stageGeometry(n int) Geometry {
	g.Layers, g.PPSize = n, 0
	return g
}

// StageBytes returns the bytes of one rank's KV cache in stage ppRank (the
// buffer [Geometry.StageLayout] needs); 0 when the geometry or ppRank is
// unusable.
func (g Geometry) StageBytes(ppRank int) uint64 {
	_, n, err := g.StageLayers(ppRank)
	if err != nil {
		return 0
	}
	return g.stageGeometry(n).RankBytes()
}

// StageLayout returns the layout of TP rank tpRank of pipeline stage
// ppRank with the stage's regions back to back in buf, as
// [Geometry.Layout] places a whole rank's: the layers StageLayers gives,
// and PPRank, PPSize, FirstLayer and ModelLayers set. buf.Len must be at
// least StageBytes(ppRank). Without pipeline parallelism (PPSize 0 or 1)
// it is Layout, ppRank 0. Errors match ErrInvalid and name the argument
// or field.
func (g Geometry) StageLayout(mem nixl.MemType, ppRank, tpRank int, buf nixl.Desc) (Layout, error) {
	first, n, err := g.StageLayers(ppRank)
	if err != nil {
		return Layout{}, err
	}
	if g.PPSize <= 1 {
		return g.Layout(mem, tpRank, buf)
	}
	l, err := g.stageGeometry(n).Layout(mem, tpRank, buf)
	if err != nil {
		return Layout{}, err
	}
	l.PPRank, l.PPSize, l.FirstLayer, l.ModelLayers = ppRank, g.PPSize, first, g.Layers
	return l, g.finish(&l)
}

// checkStage is Check for a geometry or layout with pipeline parallelism:
// the same PP size and model layers, any contiguous layer range, and the
// rest as Check compares a whole layout with a geometry of the stage's
// layers.
func (g Geometry) checkStage(l Layout) error {
	switch {
	case l.Stages() != max(g.PPSize, 1):
		return invalidf("Layout.PPSize is %d, the geometry's is %d", l.PPSize, g.PPSize)
	case l.TotalLayers() != g.Layers:
		return invalidf("Layout.ModelLayers is %d, the geometry's Layers is %d", l.TotalLayers(), g.Layers)
	case l.NumLayers < 1:
		return invalidf("Layout.NumLayers is %d, want >= 1", l.NumLayers)
	}
	plain := l
	plain.PPRank, plain.PPSize, plain.FirstLayer, plain.ModelLayers = 0, 0, 0, 0
	if err := g.stageGeometry(l.NumLayers).Check(plain); err != nil {
		return err
	}
	return l.Validate()
}
