package main

import (
	"context"
	"encoding/json"
	"fmt"
	"image/color"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/gonixl/gonixl/examples/completions"
	"github.com/gonixl/gonixl/examples/stack"
)

// The multi-turn workload (-multiturn): chat conversations of -turns turns
// whose history grows by a new user message and the reply each turn, sent
// through /v1/chat/completions as a chat client does (the earlier messages,
// the reply as it came back, the new message). A sweep point is one
// history length H: each turn adds H/(turns-1) tokens of history (its user
// message, the template's markers and the reply), so the last turn is
// prefilled over about H tokens of history. It runs once with
// bidirectional KV (prefill reads the history back from decode) and once
// without (prefill recomputes it), on fresh stacks of the preset, and
// compares the last turn's TTFT.

// multiTurnPoint is one history length with bidirectional KV on or off.
type multiTurnPoint struct {
	History       int       `json:"history_tokens"`
	Bidirectional bool      `json:"bidirectional"`
	Conversations int       `json:"conversations"`
	Turns         int       `json:"turns"`
	TurnTokens    int       `json:"new_user_tokens_per_turn"`
	Failed        int       `json:"failed_turns"`
	MeanTTFTms    []float64 `json:"mean_ttft_ms_per_turn"`
	MedianTTFTms  []float64 `json:"median_ttft_ms_per_turn"`
	// HistoryRead and HistoryRecomputed are the prefill engine's history
	// tokens read back from decode and offered but recomputed.
	HistoryRead       uint64 `json:"history_tokens_read_back"`
	HistoryRecomputed uint64 `json:"history_tokens_recomputed"`
	KVBytesVerified   uint64 `json:"kv_bytes_verified"`
	KVMismatches      uint64 `json:"kv_mismatches"`
}

// multiTurnResult is a multi-turn sweep's file.
type multiTurnResult struct {
	Preset      string           `json:"preset"`
	Description string           `json:"description"`
	Date        string           `json:"date"`
	Machine     string           `json:"machine"`
	Command     string           `json:"command"`
	OutputLen   int              `json:"output_len"`
	Rate        float64          `json:"conversation_rate"`
	Points      []multiTurnPoint `json:"points"`
}

// runMultiTurn is -multiturn: the sweep over o.histories, bidirectional KV
// on and off, written to o.resultDir (multiturn.json, multiturn_ttft.svg).
func runMultiTurn(ctx context.Context, o options, p preset, stdout, stderr io.Writer) error {
	if o.baseURL != "" {
		return fmt.Errorf("-multiturn starts its own stacks: drop -base-url")
	}
	if o.turns < 2 {
		return fmt.Errorf("-turns is %d, want >= 2 (a history needs a turn before)", o.turns)
	}
	var hists []int
	for _, f := range strings.Split(o.histories, ",") {
		h, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || h < 64 {
			return fmt.Errorf("-histories: %q is not a token count >= 64", f)
		}
		hists = append(hists, h)
	}
	res := multiTurnResult{Preset: p.Name, Description: p.Description, Date: time.Now().UTC().Format(time.RFC3339),
		Machine: o.machine, Command: "go run ./examples/bench " + strings.Join(os.Args[1:], " "), OutputLen: o.outputLen, Rate: o.convRate}
	if res.Machine == "" {
		res.Machine = hostName()
	}
	for _, h := range hists {
		for _, bidir := range []bool{false, true} {
			pt, err := multiTurnPointRun(ctx, o, p, h, bidir)
			if err != nil {
				return fmt.Errorf("history %d, bidirectional %v: %w", h, bidir, err)
			}
			fmt.Fprintf(stderr, "history %d bidirectional %v: last-turn TTFT mean %.0f ms, %d history tokens read back, %d recomputed, %d failed, %d KV mismatches\n",
				h, bidir, pt.MeanTTFTms[len(pt.MeanTTFTms)-1], pt.HistoryRead, pt.HistoryRecomputed, pt.Failed, pt.KVMismatches)
			res.Points = append(res.Points, pt)
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}
	printMultiTurn(stdout, res)
	if o.resultDir == "" {
		return nil
	}
	if err := os.MkdirAll(o.resultDir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(o.resultDir, "multiturn.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	return plotMultiTurn(res, filepath.Join(o.resultDir, "multiturn_ttft.svg"))
}

// multiTurnPointRun runs o.conversations conversations on a fresh stack.
func multiTurnPointRun(ctx context.Context, o options, p preset, history int, bidir bool) (multiTurnPoint, error) {
	s, stop, err := startPresetStack(p, "pull", false, fmt.Sprintf("mt%d", history), func(c *stack.Config) { c.Bidirectional = bidir })
	if err != nil {
		return multiTurnPoint{}, err
	}
	// Each turn adds its user message, the template's 4 marker tokens and
	// the reply to the history.
	per := history / (o.turns - 1)
	turnTokens := max(1, per-4-o.outputLen)
	pt := multiTurnPoint{History: history, Bidirectional: bidir, Conversations: o.conversations, Turns: o.turns, TurnTokens: turnTokens}
	model := o.model
	if model == "" {
		model = p.Model.Name
	}
	// One conversation first, not counted: the handshakes both ways.
	warm := chatConversations(ctx, s.URL(), model, 1, 2, 0, 16, 2, o.seed+99)
	for _, c := range warm {
		for _, t := range c {
			if t.Err != nil {
				stop()
				return pt, fmt.Errorf("warm-up: %w", t.Err)
			}
		}
	}
	p0, d0 := s.Prefill.Stats(), s.Decode.Stats()
	convs := chatConversations(ctx, s.URL(), model, o.conversations, o.turns, o.convRate, turnTokens, o.outputLen, o.seed)
	p1, d1 := s.Prefill.Stats(), s.Decode.Stats()
	pt.HistoryRead, pt.HistoryRecomputed = p1.HistoryTokensRead-p0.HistoryTokensRead, p1.HistoryTokensRecomputed-p0.HistoryTokensRecomputed
	pt.KVBytesVerified = p1.KVBytesVerified - p0.KVBytesVerified + d1.KVBytesVerified - d0.KVBytesVerified
	pt.KVMismatches = p1.KVVerifyFailures - p0.KVVerifyFailures + d1.KVVerifyFailures - d0.KVVerifyFailures
	if err := stop(); err != nil {
		return pt, err
	}
	for t := range o.turns {
		var ms []float64
		for _, c := range convs {
			if t < len(c) && c[t].Err == nil {
				ms = append(ms, float64(c[t].TTFT)/1e6)
			}
		}
		pt.Failed += o.conversations - len(ms)
		pt.MeanTTFTms = append(pt.MeanTTFTms, meanOf(ms))
		pt.MedianTTFTms = append(pt.MedianTTFTms, medianOf(ms))
	}
	if pt.Failed > 0 {
		for _, c := range convs {
			for _, t := range c {
				if t.Err != nil {
					return pt, fmt.Errorf("%d turns failed, the first: %w", pt.Failed, t.Err)
				}
			}
		}
	}
	return pt, nil
}

// chatConversations sends n conversations of turns turns, started at
// Poisson arrivals at rate per second (0: at once); turn t of a
// conversation is sent when its turn t-1 answered.
func chatConversations(ctx context.Context, url, model string, n, turns int, rate float64, words, outputLen int, seed uint64) [][]sample {
	rng := rand.New(rand.NewPCG(seed, 3))
	out := make([][]sample, n)
	client := &http.Client{Timeout: 10 * time.Minute}
	var wg sync.WaitGroup
	for i := range n {
		if rate > 0 && i > 0 {
			select {
			case <-time.After(time.Duration(rng.ExpFloat64() / rate * float64(time.Second))):
			case <-ctx.Done():
			}
		}
		wg.Go(func() {
			var msgs []completions.Message
			prompt := 0
			for t := range turns {
				msgs = append(msgs, completions.Message{Role: "user", Content: userMessage(seed, i, t, words)})
				prompt += words + 4
				s := completions.StreamChat(ctx, client, url, model, fmt.Sprintf("mt-%d-%d-t%d", seed, i, t+1), msgs, prompt, outputLen)
				out[i] = append(out[i], s)
				if s.Err != nil {
					return
				}
				msgs = append(msgs, completions.Message{Role: "assistant", Content: s.Text})
				prompt += s.OutputTokens
			}
		})
	}
	wg.Wait()
	return out
}

// userMessage is turn t's message of conversation i: words that start with
// its own index, so no two conversations share a prefix.
func userMessage(seed uint64, i, t, words int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "conv-%d-%d-turn-%d", seed, i, t)
	for w := 1; w < words; w++ {
		fmt.Fprintf(&b, " m%d", (i*7919+t*3571+w*104729)%100003)
	}
	return b.String()
}

func meanOf(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

func medianOf(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// printMultiTurn prints the last turn's mean TTFT per history, off and on,
// and their ratio.
func printMultiTurn(w io.Writer, r multiTurnResult) {
	fmt.Fprintf(w, "multi-turn chats, preset %s, %d output tokens a turn; last turn's mean TTFT (ms):\n\n", r.Preset, r.OutputLen)
	fmt.Fprintln(w, "| history tokens | recomputed | bidirectional | ratio | history tokens read back | KV mismatches |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, h := range r.histories() {
		off, on := r.point(h, false), r.point(h, true)
		if off == nil || on == nil {
			continue
		}
		a, b := off.MeanTTFTms[len(off.MeanTTFTms)-1], on.MeanTTFTms[len(on.MeanTTFTms)-1]
		fmt.Fprintf(w, "| %d | %.0f | %.0f | %.2fx | %d | %d |\n", h, a, b, a/b, on.HistoryRead, off.KVMismatches+on.KVMismatches)
	}
}

func (r multiTurnResult) histories() []int {
	var hs []int
	for _, p := range r.Points {
		if !slices.Contains(hs, p.History) {
			hs = append(hs, p.History)
		}
	}
	return hs
}

func (r multiTurnResult) point(h int, bidir bool) *multiTurnPoint {
	for i := range r.Points {
		if r.Points[i].History == h && r.Points[i].Bidirectional == bidir {
			return &r.Points[i]
		}
	}
	return nil
}

// plotMultiTurn draws the last turn's mean TTFT against the history, a line
// for each of bidirectional on and off.
func plotMultiTurn(r multiTurnResult, path string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Multi-turn chats (%s): TTFT of turn %d", r.Preset, r.Points[0].Turns)
	p.X.Label.Text = "history tokens"
	p.Y.Label.Text = "mean TTFT (ms)"
	p.Y.Min = 0
	for _, line := range []struct {
		bidir bool
		name  string
		c     color.RGBA
	}{{false, "history recomputed", color.RGBA{R: 200, A: 255}}, {true, "bidirectional (read back)", color.RGBA{B: 200, A: 255}}} {
		var xys plotter.XYs
		for _, h := range r.histories() {
			if pt := r.point(h, line.bidir); pt != nil {
				xys = append(xys, plotter.XY{X: float64(h), Y: pt.MeanTTFTms[len(pt.MeanTTFTms)-1]})
			}
		}
		if err := addLine(p, line.name, xys, line.c); err != nil {
			return err
		}
	}
	p.Legend.Top, p.Legend.Left = true, true
	return writePanels(path, []*plot.Plot{p}, 12*vg.Centimeter, 9*vg.Centimeter)
}
