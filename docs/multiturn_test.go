package docs

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
)

// The committed multi-turn sweep (examples/bench/results/qwen3-32b-h200-
// multiturn) has every history with bidirectional KV off and on, no failed
// turn, no KV mismatch, history read back only when on, and the README's
// table is the file's.
func TestCommittedMultiTurnSweep(t *testing.T) {
	const dir = "../examples/bench/results/qwen3-32b-h200-multiturn/"
	b, err := os.ReadFile(dir + "multiturn.json")
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Points []struct {
			History    int       `json:"history_tokens"`
			Bidir      bool      `json:"bidirectional"`
			Failed     int       `json:"failed_turns"`
			MeanTTFT   []float64 `json:"mean_ttft_ms_per_turn"`
			Read       uint64    `json:"history_tokens_read_back"`
			Mismatches uint64    `json:"kv_mismatches"`
		} `json:"points"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	last := map[string]float64{}
	for _, p := range r.Points {
		if p.Failed != 0 || p.Mismatches != 0 || (p.Read > 0) != p.Bidir {
			t.Errorf("history %d bidirectional %v: %d failed turns, %d KV mismatches, %d history tokens read back", p.History, p.Bidir, p.Failed, p.Mismatches, p.Read)
		}
		last[fmt.Sprintf("%d/%v", p.History, p.Bidir)] = p.MeanTTFT[len(p.MeanTTFT)-1]
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []int{8192, 16384, 24576} {
		off, ok1 := last[fmt.Sprintf("%d/false", h)]
		on, ok2 := last[fmt.Sprintf("%d/true", h)]
		if !ok1 || !ok2 {
			t.Fatalf("history %d: a point is missing", h)
		}
		row := fmt.Sprintf("| %d | %.0f ms | %.0f ms | %.2fx |", h, off, on, off/on)
		if !strings.Contains(string(readme), row) {
			t.Errorf("README lacks the sweep's row %q", row)
		}
	}
	if _, err := os.Stat(dir + "multiturn_ttft.svg"); err != nil {
		t.Error(err)
	}
}
