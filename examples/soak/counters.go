package main

import (
	"os"
	"runtime"
	"strings"
	"time"
)

// countersAt scrapes every part's counters at an idle point. After a strict
// phase (no part was killed in it) the differences since the last idle
// point must match what the client saw:
//   - the proxy answered (gonixl_proxy_requests_total, completion and chat
//     routes) exactly the calls that got an HTTP status;
//   - each engine's done requests (gonixl_engine_requests_total) are at
//     least the calls that succeeded and at most those plus the calls whose
//     client left (a leg may finish before its client goes), and none
//     failed.
func (r *runner) countersAt(i int, label string, strict bool) {
	r.each(func(conn string, t target) {
		now := map[string]series{}
		for _, part := range parts {
			path := "/metrics"
			base := t.EngineURL(part)
			if part == partProxy {
				base = t.ProxyURL()
			}
			s, err := scrape(base + path)
			if err != nil {
				r.fail("%s %s: /metrics at the idle point after step %d: %v", conn, part, i+1, err)
				continue
			}
			now[part] = s
		}
		r.mu.Lock()
		prev := map[string]series{}
		for _, part := range parts {
			prev[part] = r.last[conn+"/"+part]
			if now[part] != nil {
				r.last[conn+"/"+part] = now[part]
			}
		}
		var ph *phaseResult
		for k := len(r.rep.Phases) - 1; k >= 0; k-- {
			if r.rep.Phases[k].Conn == conn {
				ph = &r.rep.Phases[k]
				break
			}
		}
		r.mu.Unlock()
		r.progressAt(conn, i, now[partPrefill], prev[partPrefill])
		if !strict || ph == nil || label == "start" {
			return
		}
		var reached, ok, left int
		for _, x := range ph.Results {
			if x.reached() {
				reached++
			}
			switch x.Outcome {
			case outOK:
				ok++
			case outDisconnected:
				left++
			}
		}
		delta := func(part, name string, labels ...string) (float64, bool) {
			if now[part] == nil || prev[part] == nil {
				return 0, false
			}
			return now[part].sum(name, labels...) - prev[part].sum(name, labels...), true
		}
		check := counterCheck{Conn: conn, Step: i + 1, Phase: ph.Phase, Reached: reached, OK: ok, Left: left}
		if d, have := delta(partProxy, "gonixl_proxy_requests_total", `route="/v1/completions"`); have {
			c, _ := delta(partProxy, "gonixl_proxy_requests_total", `route="/v1/chat/completions"`)
			check.Proxy = int(d + c)
			if check.Proxy != reached {
				r.fail("%s step %d (%s): the proxy counted %d completion and chat requests, the client's %d got an answer",
					conn, i+1, ph.Phase, check.Proxy, reached)
			}
		}
		for _, part := range []string{partPrefill, partDecode} {
			done, have := delta(part, "gonixl_engine_requests_total", `result="done"`)
			failed, _ := delta(part, "gonixl_engine_requests_total", `result="failed"`)
			if !have {
				continue
			}
			if part == partPrefill {
				check.PrefillDone = int(done)
			} else {
				check.DecodeDone = int(done)
			}
			if int(done) < ok || int(done) > ok+left || failed != 0 {
				r.fail("%s step %d (%s): the %s engine counted %v requests done and %v failed; the client saw %d succeed and %d leave (want done in [%d, %d], 0 failed)",
					conn, i+1, ph.Phase, part, done, failed, ok, left, ok, ok+left)
			}
		}
		r.mu.Lock()
		r.rep.Counters = append(r.rep.Counters, check)
		r.mu.Unlock()
	})
}

// counterCheck is one comparison of the stack's counts with the client's.
type counterCheck struct {
	Conn                           string
	Step                           int
	Phase                          string
	Reached, OK, Left              int
	Proxy, PrefillDone, DecodeDone int
}

// figures are one process's resources at one moment.
type figures struct {
	At         time.Duration
	Who        string // "pull/decode", or "soak process" in-process
	RSS        int64
	FDs        int
	Goroutines float64
	Idle       bool // taken at an idle point
}

// resources samples every process of the stack: RSS and fds from /proc,
// goroutines from go_goroutines (in-process: this process's, once).
func (r *runner) resources(idle bool) []figures {
	at := time.Since(r.start)
	if r.cfg.Mode != modeProcess {
		rss, fds, _ := procStats(os.Getpid())
		return []figures{{At: at, Who: "soak process", RSS: rss, FDs: fds, Goroutines: float64(runtime.NumGoroutine()), Idle: idle}}
	}
	var out []figures
	r.mu.Lock()
	targets := make(map[string]target, len(r.targets))
	for k, v := range r.targets {
		targets[k] = v
	}
	r.mu.Unlock()
	for conn, t := range targets {
		for _, part := range parts {
			pid := t.PID(part)
			if pid == 0 {
				continue
			}
			rss, fds, err := procStats(pid)
			if err != nil {
				continue // killed just now
			}
			base := t.EngineURL(part)
			if part == partProxy {
				base = t.ProxyURL()
			}
			var g float64
			if s, err := scrape(base + "/metrics"); err == nil {
				g = s.sum("go_goroutines")
			}
			out = append(out, figures{At: at, Who: conn + "/" + part, RSS: rss, FDs: fds, Goroutines: g, Idle: idle})
		}
	}
	return out
}

func (r *runner) idleFigures(i int, label string) {
	// The soak's own keep-alive connections (and the goroutines and fds
	// that serve them in the proxy) are its pool, not the stack's: closing
	// them makes idle figures of one idle point comparable with another's.
	r.client.http.CloseIdleConnections()
	f := r.resources(true)
	r.mu.Lock()
	r.rep.Figures = append(r.rep.Figures, f...)
	r.mu.Unlock()
	var parts []string
	for _, x := range f {
		parts = append(parts, x.String())
	}
	r.logf("[%s] idle point after step %d (%s): %s", r.since(), i+1, label, strings.Join(parts, "; "))
}

// sample records, every SampleEvery until stopped, every engine's free
// blocks and every process's resources, for the plots.
func (r *runner) sample() (stop func()) {
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		tick := time.NewTicker(r.cfg.SampleEvery)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			f := r.resources(false)
			var free []freeSample
			r.mu.Lock()
			targets := make(map[string]target, len(r.targets))
			for k, v := range r.targets {
				targets[k] = v
			}
			r.mu.Unlock()
			for conn, t := range targets {
				for _, part := range []string{partPrefill, partDecode} {
					if s, err := scrape(t.EngineURL(part) + "/metrics"); err == nil {
						free = append(free, freeSample{At: time.Since(r.start), Who: conn + "/" + part, Free: 1 - s.sum("vllm:kv_cache_usage_perc")})
					}
				}
			}
			r.mu.Lock()
			r.rep.Samples = append(r.rep.Samples, f...)
			r.rep.Free = append(r.rep.Free, free...)
			r.mu.Unlock()
		}
	}()
	return func() { close(done); <-ended }
}

type freeSample struct {
	At   time.Duration
	Who  string
	Free float64 // fraction of the engine's blocks free
}

// progressAt checks a push-progressive stack's prefill engine at an idle
// point: no progress report refused since the last one (a refusal moves
// the request whole at its finish, right but no longer progressive, so
// the stack would soak plain push), and counts the reports taken, which
// the run wants some of (checkProgressTaken). A restarted engine counts
// from zero: only growth counts.
func (r *runner) progressAt(conn string, i int, now, prev series) {
	if conn != stackPushProgressive || now == nil {
		return
	}
	var refused, taken float64
	if prev != nil {
		refused = now.sum("gonixl_engine_progress_reports_total", `result="refused"`) - prev.sum("gonixl_engine_progress_reports_total", `result="refused"`)
		taken = now.sum("gonixl_engine_progress_reports_total", `result="taken"`) - prev.sum("gonixl_engine_progress_reports_total", `result="taken"`)
	}
	if refused > 0 {
		r.fail("%s: the prefill engine refused %v progress reports by the idle point after step %d (want none)", conn, refused, i+1)
	}
	if taken > 0 {
		r.mu.Lock()
		r.rep.ProgressReports += int(taken)
		r.mu.Unlock()
	}
}

// checkProgressTaken fails a run whose push-progressive stack took no
// progress report at all: it soaked plain push.
func (r *runner) checkProgressTaken() {
	for _, c := range r.cfg.Connectors {
		if c == stackPushProgressive && r.rep.ProgressReports == 0 {
			r.fail("%s: the prefill engine took no progress report in the whole run", c)
		}
	}
}
