package docs

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
)

// The committed sweep (examples/bench/results/qwen3-32b-h200) has the
// collocated baseline beside the split modes, its plots draw it, and the
// README's split-against-collocated figures are the sweep's.
func TestCommittedSweepHasCollocated(t *testing.T) {
	const dir = "../examples/bench/results/qwen3-32b-h200/"
	b, err := os.ReadFile(dir + "sweep.json")
	if err != nil {
		t.Fatal(err)
	}
	var sw struct {
		Modes  []string `json:"modes"`
		Points []struct {
			Mode      string  `json:"mode"`
			Rate      float64 `json:"request_rate"`
			InputLen  int     `json:"input_len"`
			Completed int     `json:"completed"`
			Goodput   float64 `json:"request_goodput"`
			Metrics   struct {
				MeanTPOT float64 `json:"mean_tpot_ms"`
			} `json:"metrics"`
		} `json:"points"`
	}
	if err := json.Unmarshal(b, &sw); err != nil {
		t.Fatal(err)
	}
	perMode := map[string]int{}
	at := map[string]string{} // mode/input/rate -> "goodput tpot"
	for _, p := range sw.Points {
		if p.Completed > 0 {
			perMode[p.Mode]++
		}
		at[fmt.Sprintf("%s/%d/%g", p.Mode, p.InputLen, p.Rate)] = fmt.Sprintf("%.2f %.1f", p.Goodput, p.Metrics.MeanTPOT)
	}
	for _, m := range []string{"pull", "pull-inline", "push", "collocated"} {
		if perMode[m] != 16 {
			t.Errorf("mode %s: %d points with completed requests, want the 4 x 4 grid (modes %v)", m, perMode[m], sw.Modes)
		}
	}
	for _, svg := range []string{"goodput.svg", "ttft.svg", "tpot.svg"} {
		s, err := os.ReadFile(dir + svg)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(s), "collocated") {
			t.Errorf("%s does not draw collocated", svg)
		}
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(string(readme)), " ")
	for _, q := range []struct{ quote, key, want string }{
		{"goodput is 1.93 (pull)", "pull/8192/8", "1.93 7.5"},
		{"and 2.07 (push)", "push/8192/8", "2.07 7.7"},
		{"against 6.65 collocated", "collocated/8192/8", "6.65 15.5"},
		{"At 16k × 4 QPS it is 0.59 against 3.10", "collocated/16384/4", "3.10 21.6"},
		{"(15.5 ms against 7.7 at 8k × 8 QPS)", "push/8192/8", "2.07 7.7"},
	} {
		if !strings.Contains(text, q.quote) {
			t.Errorf("README no longer quotes %q", q.quote)
		}
		if at[q.key] != q.want {
			t.Errorf("sweep %s is %q (goodput, mean TPOT), the README quotes %q from %q", q.key, at[q.key], q.want, q.quote)
		}
	}
}
