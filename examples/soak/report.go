package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
)

// report is what a soak found: every phase's calls, the counter checks, the
// resource figures and the checks that failed.
type report struct {
	Seed       int64
	Mode       string
	Connectors []string
	Schedule   string
	Elapsed    time.Duration
	Began      time.Time
	Phases     []phaseResult
	Counters   []counterCheck
	Figures    []figures // at idle points
	Samples    []figures // every SampleEvery
	Free       []freeSample
	FreeWaits  []time.Duration
	Flat       []flatness
	// ProgressReports are the progress reports push-progressive's
	// prefill engine took over the run (none refused: a check).
	ProgressReports int
	Failures        []string
}

// Failed says whether any check failed.
func (r *report) Failed() bool { return len(r.Failures) > 0 }

type phaseResult struct {
	Step    int
	Kind    string
	Phase   string
	Conn    string
	Strict  bool
	At      time.Duration
	Results []result
}

// counts are a phase's calls by outcome.
func (p phaseResult) counts() map[string]int {
	c := map[string]int{}
	for _, r := range p.Results {
		c[r.Outcome]++
	}
	return c
}

func (f figures) String() string {
	return fmt.Sprintf("%s rss %.1f MiB, %d fds, %.0f goroutines", f.Who, float64(f.RSS)/(1<<20), f.FDs, f.Goroutines)
}

func splitWords(s string) []string { return strings.Fields(s) }

// What "flat" means: after warm-up (the idle points of the first 10% of
// the run and the first two), the highest figure of the idle points up to
// a quarter of the run (at least the first after warm-up) is the baseline;
// the median of the idle points in the last quarter of the run
// may exceed it by at most the larger of a fraction and an absolute slack.
// A leak grows without bound; a long run makes these slacks small beside it.
const (
	rssGrowth, rssSlack = 0.25, 32 << 20
	fdGrowth, fdSlack   = 0.10, 10
	goGrowth, goSlack   = 0.10, 20
)

type flatness struct {
	Who, What     string
	Baseline, End float64
	Limit         float64
	BaselineAt, N int // idle point index of the baseline; idle points in the last quarter
	Flat          bool
}

func (r *report) finish(cfg Config) {
	byWho := map[string][]figures{}
	for _, f := range r.Figures {
		byWho[f.Who] = append(byWho[f.Who], f)
	}
	whos := make([]string, 0, len(byWho))
	for w := range byWho {
		whos = append(whos, w)
	}
	sort.Strings(whos)
	for _, who := range whos {
		fs := byWho[who]
		b := -1
		for k, f := range fs {
			if k >= 2 && f.At >= r.Elapsed/10 {
				b = k
				break
			}
		}
		if b < 0 {
			r.Failures = append(r.Failures, fmt.Sprintf("%s: too few idle points (%d) to tell whether resources stay flat", who, len(fs)))
			continue
		}
		// The baseline is the highest figure of the first quarter after
		// warm-up: connection pools fill and drain with the traffic, within
		// bounds a leak does not keep.
		first := fs[b]
		basis := []figures{fs[b]}
		for _, f := range fs[b+1:] {
			if f.At <= max(r.Elapsed/4, fs[b].At) {
				basis = append(basis, f)
			}
		}
		var tail []figures
		for _, f := range fs[b:] {
			if f.At >= r.Elapsed*3/4 {
				tail = append(tail, f)
			}
		}
		if len(tail) == 0 {
			tail = fs[len(fs)-1:]
		}
		for _, m := range []struct {
			what          string
			get           func(figures) float64
			growth, slack float64
		}{
			{"RSS (MiB)", func(f figures) float64 { return float64(f.RSS) / (1 << 20) }, rssGrowth, rssSlack / (1 << 20)},
			{"open fds", func(f figures) float64 { return float64(f.FDs) }, fdGrowth, fdSlack},
			{"goroutines", func(f figures) float64 { return f.Goroutines }, goGrowth, goSlack},
		} {
			base := m.get(first)
			for _, f := range basis {
				base = max(base, m.get(f))
			}
			vals := make([]float64, len(tail))
			for k, f := range tail {
				vals[k] = m.get(f)
			}
			slices.Sort(vals)
			end := vals[len(vals)/2]
			limit := base + max(base*m.growth, m.slack)
			fl := flatness{Who: who, What: m.what, Baseline: base, End: end, Limit: limit, BaselineAt: b, N: len(tail), Flat: end <= limit}
			r.Flat = append(r.Flat, fl)
			if !fl.Flat {
				r.Failures = append(r.Failures, fmt.Sprintf("%s: %s grew from %.1f at idle point %d to a median of %.1f over the last quarter (limit %.1f)",
					who, m.what, base, b, end, limit))
			}
		}
	}
}

// write writes report.md, report.json and the plots into dir.
func (r *report) write(dir string) error {
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(r.markdown()), 0o644); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), b, 0o644); err != nil {
		return err
	}
	return r.plots(dir)
}

func (r *report) markdown() string {
	var b strings.Builder
	verdict := "PASS"
	if r.Failed() {
		verdict = fmt.Sprintf("FAIL (%d checks)", len(r.Failures))
	}
	fmt.Fprintf(&b, "# Soak report: %s\n\nSeed %d, mode %s, connectors %s, %v. Schedule: %s.\n\n",
		verdict, r.Seed, r.Mode, strings.Join(r.Connectors, ", "), r.Elapsed.Round(time.Second), r.Schedule)
	if r.ProgressReports > 0 {
		fmt.Fprintf(&b, "push-progressive's prefill engine took %d progress reports (per chunk and per layer), none refused.\n\n", r.ProgressReports)
	}
	if r.Mode == modeInproc {
		b.WriteString("In-process mode (a build without `-tags nixl`): the engines and the proxy run in the soak's process over real HTTP, on loopback agents; a kill is a Close with a cancelled context (the proxy: its listener and connections closed) and the restart binds the same ports. RSS, fds and goroutines are the whole process's.\n\n")
	}
	b.WriteString("## Calls\n\n| connector | phase | calls | ok | error (cause named) | left on purpose | proxy down | no cause | wrong text | UNANSWERED |\n|---|---|---|---|---|---|---|---|---|---|\n")
	type key struct{ conn, phase string }
	agg := map[key]map[string]int{}
	var keys []key
	for _, p := range r.Phases {
		name := p.Kind
		if strings.HasPrefix(p.Phase, "recover") {
			name = "recover after kill"
		} else if p.Kind == stepKill {
			name = p.Phase + " (kill episode)"
		}
		k := key{p.Conn, name}
		if agg[k] == nil {
			agg[k] = map[string]int{}
			keys = append(keys, k)
		}
		for o, n := range p.counts() {
			agg[k][o] += n
			agg[k]["all"] += n
		}
	}
	sort.SliceStable(keys, func(i, j int) bool { return keys[i].conn < keys[j].conn })
	for _, k := range keys {
		c := agg[k]
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %d | %d | %d | %d | %d |\n", k.conn, k.phase, c["all"], c[outOK], c[outError],
			c[outDisconnected], c[outUnreached], c[outNoCause], c[outWrongText], c[outUnanswered])
	}
	var lats []time.Duration
	for _, p := range r.Phases {
		for _, x := range p.Results {
			if x.Outcome == outOK {
				lats = append(lats, x.Latency)
			}
		}
	}
	if len(lats) > 0 {
		slices.Sort(lats)
		fmt.Fprintf(&b, "\nLatency of the calls that succeeded: median %v, p99 %v, max %v.\n",
			lats[len(lats)/2].Round(time.Millisecond), lats[len(lats)*99/100].Round(time.Millisecond), lats[len(lats)-1].Round(time.Millisecond))
	}
	if len(r.FreeWaits) > 0 {
		w := slices.Clone(r.FreeWaits)
		slices.Sort(w)
		fmt.Fprintf(&b, "\nFree blocks back to 100%% on every engine at %d idle-point checks; the longest wait %v (a pull prefill's blocks whose decode leg never came wait for the lease).\n",
			len(w), w[len(w)-1].Round(time.Millisecond))
	}
	b.WriteString("\n## Counters (strict phases: the stack's counts against the client's)\n\n| connector | step | phase | answered | ok | left | proxy counted | prefill done | decode done |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, c := range r.Counters {
		fmt.Fprintf(&b, "| %s | %d | %s | %d | %d | %d | %d | %d | %d |\n", c.Conn, c.Step, c.Phase, c.Reached, c.OK, c.Left, c.Proxy, c.PrefillDone, c.DecodeDone)
	}
	fmt.Fprintf(&b, "\n## Resources at idle points\n\nFlat: the median over the last quarter's idle points at most the baseline (the highest idle point from the end of warm-up, the first 10%% of the run and its first two idle points, to a quarter of the run) plus the larger of %.0f%% and %d MiB (RSS), %.0f%% and %d (fds), %.0f%% and %d (goroutines).\n\n",
		rssGrowth*100, rssSlack>>20, fdGrowth*100, fdSlack, goGrowth*100, goSlack)
	b.WriteString("| process | figure | baseline | last quarter median | limit | flat |\n|---|---|---|---|---|---|\n")
	for _, f := range r.Flat {
		fmt.Fprintf(&b, "| %s | %s | %.1f | %.1f | %.1f | %v |\n", f.Who, f.What, f.Baseline, f.End, f.Limit, f.Flat)
	}
	b.WriteString("\n## Failed checks\n\n")
	if len(r.Failures) == 0 {
		b.WriteString("None.\n")
	}
	for _, f := range r.Failures {
		fmt.Fprintf(&b, "- %s\n", f)
	}
	b.WriteString("\nPlots: latency.png, free_blocks.png, rss.png.\n")
	return b.String()
}
