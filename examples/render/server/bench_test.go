package server

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gonixl/gonixl/examples/render/chat"
)

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkServerRender9000PerCore: one render server with Workers=1 (vLLM's
// default --renderer-num-workers) answering 9,000-token renders over HTTP
// from 4 concurrent clients in the same process. It reports req/s (wall),
// the CPU the whole process used per wall second (getrusage: user+system,
// clients included, so it over-counts the server), and req/s per CPU
// second ("req/s/core"). The guide's figure: 73 req/s on a little over one
// core.
func BenchmarkServerRender9000PerCore(b *testing.B) {
	s, err := New(Config{Workers: 1})
	if err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	para := strings.Repeat("The render tier turns chat requests into token ids and back, on CPU, so that engines see token ids only. ", 430)
	req := chat.Request{Messages: []chat.Turn{{Role: "user", Content: chat.TextContent(para)}}}
	body, _ := json.Marshal(req)
	ids, _ := s.Pipeline().Render(&req)
	tr := &http.Transport{MaxIdleConnsPerHost: 8}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	b.SetParallelism(2) // 2 x GOMAXPROCS clients keep the one worker busy
	cpu0, wall0 := cpuTime(), time.Now()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := hc.Post(ts.URL+"/v1/chat/completions/render", "application/json", bytes.NewReader(body))
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
	b.StopTimer()
	cpu, wall := cpuTime()-cpu0, time.Since(wall0)
	b.ReportMetric(float64(len(ids)), "prompt-tokens")
	b.ReportMetric(float64(b.N)/wall.Seconds(), "req/s")
	b.ReportMetric(cpu.Seconds()/wall.Seconds(), "cores")
	b.ReportMetric(float64(b.N)/cpu.Seconds(), "req/s/core")
}
