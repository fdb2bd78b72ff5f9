package server

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
)

// report is one Progress call as recordingRank saw it.
type report struct {
	ID, TransferID string
	Blocks         []int
	Tokens         int
	FinalLayers    int
}

// recordingRank is a prefill rank that records its progress reports and
// refuses them all when refuse is set.
type recordingRank struct {
	connector.Producer
	refuse  bool
	reports []report
}

func (r *recordingRank) Progress(q connector.Request) error {
	if len(q.Blocks) != 1 {
		return errors.New("want one list")
	}
	r.reports = append(r.reports, report{ID: q.ID, TransferID: q.TransferID, Blocks: slices.Clone(q.Blocks[0]), Tokens: q.Tokens, FinalLayers: q.FinalLayers})
	if r.refuse {
		return connector.ErrInvalid
	}
	return nil
}

// layerLoop is an engine loop of a model of 3 layers and 4-token blocks
// with no modeled compute (nothing sleeps), whose ranks hold the layers
// layouts say (FirstLayer, NumLayers), and a request of 10 tokens in
// blocks 7, 3 and 9 (the last one holding 2 tokens).
func layerLoop(chunk int, perLayer bool, layouts ...descriptors.Layout) (*loop, []*recordingRank, *request) {
	s := &Server{cfg: Config{ProgressChunk: chunk, ProgressLayers: perLayer, Model: ModelSpec{Layers: 3, BlockSize: 4}}, log: zap.NewNop(), lays: layouts}
	var ranks []*recordingRank
	for range layouts {
		rk := &recordingRank{}
		ranks = append(ranks, rk)
		s.prods = append(s.prods, rk)
	}
	r := &request{engID: "req-1", tid: "tid-1", kind: kindPrefill, tokens: make([]int, 10), blocks: []int{7, 3, 9, 12}, promptBlocks: 3}
	return &loop{s: s}, ranks, r
}

func rep(blocks []int, finalLayers int) report {
	return report{ID: "req-1", TransferID: "tid-1", Blocks: blocks, Tokens: 10, FinalLayers: finalLayers}
}

var wholeModel = descriptors.Layout{NumLayers: 3}

// Chunks of 4 tokens, per layer: after each of a chunk's 3 layers its
// blocks are final in the layers done, the third layer's report the
// chunk's whole one (FinalLayers 0); the last chunk reports all the
// prompt's blocks, its last block of 2 tokens included, but not its last
// layer (RequestFinished's): 3 x 3 - 1 reports.
func TestProgressLayersChunked(t *testing.T) {
	l, ranks, r := layerLoop(4, true, wholeModel)
	l.computeChunks([]*request{r}, time.Now())
	assert.Equal(t, []report{
		rep([]int{7}, 1), rep([]int{7}, 2), rep([]int{7}, 0),
		rep([]int{7, 3}, 1), rep([]int{7, 3}, 2), rep([]int{7, 3}, 0),
		rep([]int{7, 3, 9}, 1), rep([]int{7, 3, 9}, 2),
	}, ranks[0].reports)
	assert.Equal(t, []bool{true}, r.progressed)
	assert.Equal(t, Stats{ProgressReports: 8}, l.s.Stats())
}

// Per layer without ProgressChunk: the prompt is one chunk, reported
// after each layer but the last (vLLM #56874's per-layer WRITEs of a
// prefill that is not chunked).
func TestProgressLayersOneChunk(t *testing.T) {
	l, ranks, r := layerLoop(0, true, wholeModel)
	l.computeChunks([]*request{r}, time.Now())
	assert.Equal(t, []report{rep([]int{7, 3, 9}, 1), rep([]int{7, 3, 9}, 2)}, ranks[0].reports)
}

// Without ProgressLayers a chunk is reported once, whole, and the last
// chunk not at all.
func TestProgressChunksWhole(t *testing.T) {
	l, ranks, r := layerLoop(4, false, wholeModel)
	l.computeChunks([]*request{r}, time.Now())
	assert.Equal(t, []report{rep([]int{7}, 0), rep([]int{7, 3}, 0)}, ranks[0].reports)
}

// Chunks of 2 tokens in 4-token blocks: a chunk that completes no block
// reports nothing (no layer of it either).
func TestProgressLayersChunkWithinABlock(t *testing.T) {
	l, ranks, r := layerLoop(2, true, wholeModel)
	l.computeChunks([]*request{r}, time.Now())
	assert.Equal(t, []report{
		rep([]int{7}, 1), rep([]int{7}, 2), rep([]int{7}, 0), // tokens 2..4
		rep([]int{7, 3}, 1), rep([]int{7, 3}, 2), rep([]int{7, 3}, 0), // tokens 6..8
		rep([]int{7, 3, 9}, 1), rep([]int{7, 3, 9}, 2), // tokens 8..10, the last chunk
	}, ranks[0].reports)
}

// Pipeline stages: stage 0 holds layers 0 and 1, stage 1 layer 2. Each
// rank hears of its own layers, counted from its first; stage 0's blocks
// are whole after layer 1 (FinalLayers 0), also in the last chunk, and
// stage 1's last chunk is RequestFinished's.
func TestProgressLayersStages(t *testing.T) {
	l, ranks, r := layerLoop(4, true, descriptors.Layout{NumLayers: 2}, descriptors.Layout{FirstLayer: 2, NumLayers: 1})
	l.computeChunks([]*request{r}, time.Now())
	assert.Equal(t, []report{
		rep([]int{7}, 1), rep([]int{7}, 0),
		rep([]int{7, 3}, 1), rep([]int{7, 3}, 0),
		rep([]int{7, 3, 9}, 1), rep([]int{7, 3, 9}, 0),
	}, ranks[0].reports)
	assert.Equal(t, []report{rep([]int{7}, 0), rep([]int{7, 3}, 0)}, ranks[1].reports)
}

// A rank that refuses a report is not asked again for the request; the
// others go on, and only they hold its blocks.
func TestProgressLayersRefused(t *testing.T) {
	l, ranks, r := layerLoop(4, true, wholeModel, wholeModel)
	ranks[1].refuse = true
	l.computeChunks([]*request{r}, time.Now())
	assert.Len(t, ranks[0].reports, 8)
	assert.Equal(t, []report{rep([]int{7}, 1)}, ranks[1].reports)
	assert.Equal(t, []bool{true, false}, r.progressed)
	assert.Equal(t, []bool{false, true}, r.progressOff)
	assert.Equal(t, Stats{ProgressReports: 8, ProgressRefused: 1}, l.s.Stats())
}

// A request prefilled for itself (no remote decode) reports nothing.
func TestProgressLayersLocalRequest(t *testing.T) {
	l, ranks, r := layerLoop(4, true, wholeModel)
	r.kind = kindLocal
	l.computeChunks([]*request{r}, time.Now())
	assert.Empty(t, ranks[0].reports)
}

func TestProgressLayersNeedsPush(t *testing.T) {
	_, err := New(Config{Role: RolePrefill, Connector: ConnPull, ProgressLayers: true})
	require.EqualError(t, err, `engine: Config.ProgressLayers is set with connector "pull": progress reports need the push connector (pull READs only after prefill answered)`)
}

// BenchmarkProgressLayers is the engine's side of per-layer reports: one
// request of 16 blocks in chunks of 4 blocks over 64 layers, 8 ranks
// (255 reports a rank), to a rank that records nothing.
func BenchmarkProgressLayers(b *testing.B) {
	s := &Server{cfg: Config{ProgressChunk: 64, ProgressLayers: true, Model: ModelSpec{Layers: 64, BlockSize: 16}}, log: zap.NewNop()}
	for range 8 {
		s.lays = append(s.lays, descriptors.Layout{NumLayers: 64})
		s.prods = append(s.prods, nopRank{})
	}
	l := &loop{s: s}
	blocks := make([]int, 16)
	b.ReportAllocs()
	for b.Loop() {
		r := &request{engID: "req-1", kind: kindPrefill, tokens: make([]int, 256), blocks: blocks, promptBlocks: 16}
		l.computeChunks([]*request{r}, time.Now())
	}
}

type nopRank struct{ connector.Producer }

func (nopRank) Progress(connector.Request) error { return nil }
