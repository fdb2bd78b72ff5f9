package main

import (
	"context"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/gonixl/gonixl/examples/stack"
)

// Modes of running the stack.
const (
	modeProcess  = "process"   // separate processes, NIXL over UCX (needs -tags nixl)
	modeInproc   = "inprocess" // one process, loopback agents, real HTTP
	clientWindow = 120 * time.Second
)

// Config is one soak run.
type Config struct {
	Seed       int64
	Duration   time.Duration // the long schedule's planned length (Short: ignored)
	Short      bool
	Mode       string
	Connectors []string
	Out        string    // report, plots and logs
	Progress   io.Writer // progress lines
	// Deadline bounds every client request; one that passes it is
	// UNANSWERED (default clientWindow).
	Deadline time.Duration
	// SampleEvery is the period of the resource and free-block samples
	// (default 1 s short, 5 s long).
	SampleEvery time.Duration
	shape       stackShape
}

// run is one soak: it starts a stack per connector, runs the schedule on
// all of them in lockstep (every idle point is idle for every stack, so
// that this process's own figures in-process are idle figures), checks as
// it goes, and writes the report. The report's Failed says whether a check
// failed; err is for a soak that could not run.
func run(ctx context.Context, cfg Config) (*report, error) {
	if cfg.Deadline == 0 {
		cfg.Deadline = clientWindow
	}
	if cfg.SampleEvery == 0 {
		cfg.SampleEvery = map[bool]time.Duration{true: time.Second, false: 5 * time.Second}[cfg.Short]
	}
	if cfg.shape == (stackShape{}) {
		cfg.shape = defaultShape
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	if err := os.MkdirAll(filepath.Join(cfg.Out, "logs"), 0o755); err != nil {
		return nil, err
	}
	sched := shortSchedule(cfg.Seed)
	if !cfg.Short {
		sched = longSchedule(cfg.Seed, cfg.Duration)
	}
	r := &runner{cfg: cfg, rep: &report{Seed: cfg.Seed, Mode: cfg.Mode, Connectors: cfg.Connectors, Schedule: describe(sched)},
		targets: map[string]target{}, last: map[string]series{}}
	r.logf("soak: seed %d, mode %s, connectors %v: %s", cfg.Seed, cfg.Mode, cfg.Connectors, r.rep.Schedule)
	var bin stack.Programs
	if cfg.Mode == modeProcess {
		var err error
		r.logf("building the engine and the proxy with -tags nixl")
		if bin, err = stack.BuildPrograms(ctx, filepath.Join(cfg.Out, "bin")); err != nil {
			return nil, err
		}
	}
	defer r.closeTargets()
	for _, conn := range cfg.Connectors {
		var t target
		var err error
		if cfg.Mode == modeProcess {
			t, err = startProcs(ctx, bin, filepath.Join(cfg.Out, "logs"), conn, cfg.shape)
		} else {
			t, err = startInproc(conn, cfg.shape)
		}
		if err != nil {
			return nil, fmt.Errorf("start the %s stack: %w", conn, err)
		}
		r.targets[conn] = t
	}
	r.client = &client{http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second}},
		model: cfg.shape.ServedModel, geom: cfg.shape.geometry(), deadline: cfg.Deadline}
	r.start = time.Now()
	r.rep.Began = r.start
	stopSampling := r.sample()
	r.checkpoint(-1, "start", false)
	for i, st := range sched {
		if ctx.Err() != nil {
			r.fail("the soak was interrupted at step %d", i+1)
			break
		}
		r.runStep(i, st)
		r.logf("[%s] step %d/%d %v: idle %v", r.since(), i+1, len(sched), st, st.Idle.Round(100*time.Millisecond))
		select {
		case <-time.After(st.Idle):
		case <-ctx.Done():
		}
	}
	stopSampling()
	r.checkProgressTaken()
	r.closeTargets()
	r.rep.Elapsed = time.Since(r.start)
	r.rep.finish(cfg)
	if err := r.rep.write(cfg.Out); err != nil {
		return r.rep, err
	}
	return r.rep, nil
}

type runner struct {
	cfg     Config
	rep     *report
	targets map[string]target
	client  *client
	start   time.Time
	mu      sync.Mutex
	last    map[string]series // conn/part -> the counters at the last idle point
	// logMu serializes progress lines: every connector's stack logs from
	// its own goroutine, and Progress need not be safe for concurrent use.
	logMu sync.Mutex
}

func (r *runner) since() string { return time.Since(r.start).Round(time.Second).String() }

func (r *runner) logf(format string, a ...any) {
	r.logMu.Lock()
	defer r.logMu.Unlock()
	fmt.Fprintf(r.cfg.Progress, format+"\n", a...)
}

func (r *runner) fail(format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	r.mu.Lock()
	r.rep.Failures = append(r.rep.Failures, msg)
	r.mu.Unlock()
	r.logf("[%s] FAIL: %s", r.since(), msg)
}

func (r *runner) closeTargets() {
	for conn, t := range r.targets {
		if err := t.Close(); err != nil {
			r.fail("%s: closing the stack: %v", conn, err)
		}
		delete(r.targets, conn)
	}
}

// each runs f for every connector's stack at once and waits.
func (r *runner) each(f func(conn string, t target)) {
	var wg sync.WaitGroup
	for conn, t := range r.targets {
		wg.Add(1)
		go func() { defer wg.Done(); f(conn, t) }()
	}
	wg.Wait()
}

// runStep runs st on every stack, then the idle point; a kill step runs its
// episode (errors allowed, each must name its cause), the restart, an idle
// point, then strict traffic (every call must succeed) and another.
func (r *runner) runStep(i int, st step) {
	r.each(func(conn string, t target) {
		rng := rand.New(rand.NewSource(st.Seed))
		res := r.traffic(rng, conn, st, t)
		r.record(i, st, conn, st.Kind, res, st.Kind != stepKill)
	})
	strict := st.Kind != stepKill
	r.checkpoint(i, st.Kind, strict)
	if st.Kind != stepKill {
		return
	}
	r.each(func(conn string, t target) {
		rng := rand.New(rand.NewSource(st.Seed + 1))
		tr := &traffic{c: r.client, base: t.ProxyURL()}
		tr.steady(rng, st.Rate, st.For, nil)
		r.record(i, st, conn, "recover after kill "+st.Part, tr.wait(), true)
	})
	r.checkpoint(i, "recover", true)
}

// traffic runs one step's calls on t and returns their results.
func (r *runner) traffic(rng *rand.Rand, conn string, st step, t target) []result {
	tr := &traffic{c: r.client, base: t.ProxyURL()}
	capacity := r.cfg.shape.MaxBatch
	switch st.Kind {
	case stepBurst:
		for range 3 * capacity {
			tr.send(drawCall(rng))
		}
	case stepSteady:
		tr.steady(rng, st.Rate, st.For, nil)
	case stepSlow, stepDisconnect:
		tr.steady(rng, st.Rate, st.For, func(i int, k call) call {
			if i%3 != 0 {
				return k
			}
			k.Stream = true
			k.Behave = behaveDisconnect
			if st.Kind == stepSlow {
				k.Behave, k.MaxTokens = behaveSlow, 256
			}
			return k
		})
	case stepKill:
		done := make(chan struct{})
		go func() {
			defer close(done)
			tr.steady(rng, st.Rate, st.For, nil)
		}()
		time.Sleep(st.For / 3)
		if err := t.Kill(st.Part); err != nil {
			r.fail("%s: kill %s: %v", conn, st.Part, err)
		}
		<-done
		res := tr.wait()
		if err := t.Restart(st.Part, time.Minute); err != nil {
			r.fail("%s: restart %s: %v", conn, st.Part, err)
		}
		// The strict traffic after the idle point must find the restarted
		// part in the proxy's rotation, which takes the proxy's next health
		// check (examples/proxy/README.md).
		restarted := time.Now()
		if err := waitInRotation(t.ProxyURL(), 1, restarted.Add(r.cfg.shape.HealthInterval), time.Minute); err != nil {
			r.fail("%s: after the restart of %s: %v", conn, st.Part, err)
		} else {
			r.logf("[%s] %s: %s restarted; the proxy reports every engine in rotation %v later", r.since(), conn, st.Part,
				time.Since(restarted).Round(100*time.Millisecond))
		}
		return res
	}
	return tr.wait()
}

// record checks a phase's results: never UNANSWERED, never wrong text, never
// an error without a cause; in a strict phase every call ends ok (or
// disconnected, when its client left on purpose).
func (r *runner) record(i int, st step, conn, phase string, res []result, strict bool) {
	ph := phaseResult{Step: i, Kind: st.Kind, Phase: phase, Conn: conn, Strict: strict, At: time.Since(r.start), Results: res}
	counts := ph.counts()
	r.mu.Lock()
	r.rep.Phases = append(r.rep.Phases, ph)
	r.mu.Unlock()
	for _, x := range res {
		bad := x.Outcome == outUnanswered || x.Outcome == outWrongText || x.Outcome == outNoCause
		wantLeft := x.Call.Behave == behaveDisconnect
		if strict && !bad {
			bad = (x.Outcome != outOK && !wantLeft) || (wantLeft && x.Outcome != outDisconnected && x.Outcome != outOK)
		}
		if bad {
			r.fail("%s step %d (%s): a %s call ended %s: %s", conn, i+1, phase, x.Call.describe(), x.Outcome, x.Cause)
		}
	}
	r.logf("[%s] %s step %d %s: %v", r.since(), conn, i+1, phase, counts)
}

func (k call) describe() string {
	s := "completion"
	if k.Chat {
		s = "chat"
	}
	if k.Stream {
		s += " stream"
	}
	if k.Behave != behaveNormal {
		s += " (" + k.Behave + ")"
	}
	return fmt.Sprintf("%s of %d words, %d tokens", s, len(splitWords(k.Prompt)), k.MaxTokens)
}

// checkpoint is an idle point: nothing is in flight. It waits for every
// block to be free on every engine, checks the KV mismatch counters, and,
// after a strict phase, the engines' and the proxy's counts against the
// client's; then records the idle figures (RSS, fds, goroutines).
func (r *runner) checkpoint(i int, label string, strict bool) {
	bound := r.cfg.shape.Lease + r.cfg.shape.RequestTimeout + 30*time.Second
	r.each(func(conn string, t target) {
		for _, part := range []string{partPrefill, partDecode} {
			start := time.Now()
			var used float64 = -1
			var s series
			var err error
			for time.Since(start) < bound {
				if s, err = scrape(t.EngineURL(part) + "/metrics"); err == nil {
					used = s.sum("vllm:kv_cache_usage_perc") + s.sum("vllm:num_requests_running") + s.sum("vllm:num_requests_waiting")
					if used == 0 {
						break
					}
				}
				time.Sleep(100 * time.Millisecond)
			}
			if used != 0 {
				r.fail("%s %s at the idle point after step %d (%s): blocks in use or requests in flight %v after %v (last scrape error: %v)",
					conn, part, i+1, label, used, bound, err)
				continue
			}
			r.mu.Lock()
			r.rep.FreeWaits = append(r.rep.FreeWaits, time.Since(start))
			r.mu.Unlock()
			if f := s.sum("gonixl_engine_kv_verify_failures_total"); f != 0 {
				r.fail("%s %s: kv_verify_failures is %v at the idle point after step %d", conn, part, f, i+1)
			}
		}
	})
	r.countersAt(i, label, strict)
	r.idleFigures(i, label)
}
