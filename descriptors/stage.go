package descriptors

// Pipeline parallelism. A prefill engine of PP size n runs its model in n
// stages; stage s holds a contiguous range of the model's layers, and each
// of its TP ranks registers the KV cache of those layers only. Its Layout
// says so with PPRank, PPSize, FirstLayer and ModelLayers; NumLayers and
// Regions are the stage's own. A layout without pipeline parallelism leaves
// all four zero (PPSize 0 means 1), holds every layer, and encodes on the
// wire exactly as before the fields existed.
//
// Mapping a stage against a layout that holds every layer (a decode rank:
// decode is never pipeline-parallel) moves the layers both hold, region by
// region, each layer of the stage into the same model layer on the other
// side; see [Compatible].

// MaxPPSize bounds Layout.PPSize and Geometry.PPSize: a stage holds at
// least one layer.
const MaxPPSize = MaxLayers

// Stages returns the layout's pipeline-parallel size: PPSize, or 1 when it
// is 0.
func (l *Layout) Stages() int { return max(l.PPSize, 1) }

// TotalLayers returns the model's layer count: ModelLayers, or NumLayers
// when it is 0 (a layout without pipeline parallelism).
func (l *Layout) TotalLayers() int {
	if l.ModelLayers > 0 {
		return l.ModelLayers
	}
	return l.NumLayers
}

// WorldRank returns the rank's index among every rank of its engine,
// PPRank*TPSize + TPRank: the rank PUSH_FAIL names and the order in which
// a handshake payload lists the ranks.
func (l *Layout) WorldRank() int { return l.PPRank*l.TPSize + l.TPRank }

// whole reports whether the layout holds every layer of the model.
func (l *Layout) whole() bool { return l.FirstLayer == 0 && l.NumLayers == l.TotalLayers() }

// checkStage is the part of check about the stage fields; it runs after the
// basic fields are known to be positive and bounded.
func (l *Layout) checkStage() error {
	switch {
	case l.PPSize < 0:
		return invalidf("PPSize %d must not be negative (0 means 1)", l.PPSize)
	case l.PPSize > MaxPPSize:
		return invalidf("PPSize %d too large (max %d)", l.PPSize, MaxPPSize)
	case l.PPRank < 0 || l.PPRank >= l.Stages():
		return invalidf("PPRank %d out of range [0, %d)", l.PPRank, l.Stages())
	case l.FirstLayer < 0:
		return invalidf("FirstLayer %d must not be negative", l.FirstLayer)
	case l.ModelLayers < 0:
		return invalidf("ModelLayers %d must not be negative (0 means NumLayers)", l.ModelLayers)
	case l.ModelLayers > MaxLayers:
		return invalidf("ModelLayers %d is above the limit of %d", l.ModelLayers, MaxLayers)
	case l.FirstLayer > l.TotalLayers()-l.NumLayers:
		return invalidf("FirstLayer %d + NumLayers %d exceeds ModelLayers %d", l.FirstLayer, l.NumLayers, l.TotalLayers())
	case l.Stages() == 1 && !l.whole():
		return invalidf("FirstLayer %d, NumLayers %d of ModelLayers %d with PPSize %d: a layout without pipeline parallelism holds every layer",
			l.FirstLayer, l.NumLayers, l.TotalLayers(), l.PPSize)
	case l.Stages() > l.TotalLayers():
		return invalidf("PPSize %d exceeds ModelLayers %d: every stage holds at least one layer", l.PPSize, l.TotalLayers())
	case l.Stages() > 1 && len(l.Groups) > 0:
		return invalidf("PPSize %d with %d KV-cache groups: a pipeline stage of a model of several groups is not supported", l.PPSize, len(l.Groups))
	}
	return nil
}

// compatibleStages checks the stage facts of two checked layouts: the
// same model layer count, and layer ranges that share at least one layer
// (the layers a mapping moves).
func compatibleStages(src, dst *Layout) error {
	if src.TotalLayers() != dst.TotalLayers() {
		return differ("ModelLayers (the model's layers)", src.TotalLayers(), dst.TotalLayers())
	}
	lo, hi := layerOverlap(src, dst)
	if lo >= hi {
		return incompatiblef("layer ranges do not overlap: source stage %d holds layers [%d, %d), destination stage %d holds [%d, %d)",
			src.PPRank, src.FirstLayer, src.FirstLayer+src.NumLayers, dst.PPRank, dst.FirstLayer, dst.FirstLayer+dst.NumLayers)
	}
	return nil
}

// layerOverlap returns the model layers [lo, hi) both layouts hold.
func layerOverlap(src, dst *Layout) (lo, hi int) {
	lo = max(src.FirstLayer, dst.FirstLayer)
	hi = min(src.FirstLayer+src.NumLayers, dst.FirstLayer+dst.NumLayers)
	return lo, hi
}

// stageViews returns src and dst restricted to the layers both hold, so
// that region i of one is the same model layer as region i of the other.
// Two layouts that hold the same layers (every pair without pipeline
// parallelism) come back as they are, without allocating. The pair must be
// compatible.
func stageViews(src, dst *Layout) (*Layout, *Layout) {
	if src.FirstLayer == dst.FirstLayer && src.NumLayers == dst.NumLayers {
		return src, dst
	}
	lo, hi := layerOverlap(src, dst)
	s, d := src.layerView(lo, hi), dst.layerView(lo, hi)
	return &s, &d
}

// layerView returns l restricted to model layers [lo, hi), which l holds.
// It shares l's regions.
func (l *Layout) layerView(lo, hi int) Layout {
	per := l.NumRegions() / l.NumLayers
	v := *l
	v.Regions = l.Regions[(lo-l.FirstLayer)*per : (hi-l.FirstLayer)*per]
	v.FirstLayer, v.NumLayers = lo, hi-lo
	return v
}

// CheckStages reports whether stages, one layout per pipeline stage in
// stage order (any TP rank of each), make up one model between them: the
// same PP size, equal to len(stages), stage s with PPRank s, stage 0
// starting at layer 0, each stage starting where the one before ended, the
// last ending at ModelLayers, and every stage of the same model layer
// count. A decode rank checks this before it counts one completion per
// writing rank of each stage as the whole request: a gap would be layers no
// rank writes, an overlap layers written twice. The error matches
// ErrInvalid and names the stage and the field.
func CheckStages(stages []*Layout) error {
	if len(stages) == 0 {
		return invalidf("no pipeline stages")
	}
	next, model := 0, stages[0].TotalLayers()
	for s, l := range stages {
		switch {
		case l.Stages() != len(stages):
			return invalidf("stage %d: PPSize %d, want %d (the number of stages)", s, l.Stages(), len(stages))
		case l.PPRank != s:
			return invalidf("stage %d: PPRank is %d", s, l.PPRank)
		case l.TotalLayers() != model:
			return invalidf("stage %d: ModelLayers %d, stage 0 has %d", s, l.TotalLayers(), model)
		case l.FirstLayer != next && s == 0:
			return invalidf("stage 0: FirstLayer %d, want 0", l.FirstLayer)
		case l.FirstLayer != next:
			return invalidf("stage %d: FirstLayer %d, want %d (where stage %d ends)", s, l.FirstLayer, next, s-1)
		}
		next = l.FirstLayer + l.NumLayers
	}
	if next != model {
		return invalidf("stage %d ends at layer %d, ModelLayers is %d: the stages do not cover the model", len(stages)-1, next, model)
	}
	return nil
}
