package pd

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

// GET /metrics after a few requests: the named series with their exact values.
func TestMetricsEndpoint(t *testing.T) {
	pf := newFake(t, "prefill", "pull", nil)
	refusing := newFake(t, "decode", "pull", answer503)
	good := newFake(t, "decode", "pull", func(f *fake, w http.ResponseWriter, r *http.Request, rec recorded) {
		if rec.body["stream"] == true {
			streamSSE(w, nil)
			return
		}
		answerJSON(f, w, r, rec)
	})
	h := newHarness(t, Config{HealthInterval: time.Hour}, []*fake{pf}, []*fake{refusing, good})
	eventually(t, "engines in rotation", func() bool { return h.p.inRotationCount(h.p.pools().decode) == 2 })
	for range 2 {
		h.postOK(t) // each starts on the refusing engine (two picks per request) and fails over
	}
	resp := h.post(t, context.Background(), strings.Replace(clientBody, `"stream":false`, `"stream":true`, 1), nil)
	if b := readAll(t, resp); resp.StatusCode != 200 || string(b) != strings.Join(sseChunks, "") {
		t.Fatalf("stream: %d %s", resp.StatusCode, b)
	}
	resp, err := http.Get(h.front.URL + "/nope")
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)

	scrape := func() string {
		resp, err := http.Get(h.front.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 {
			t.Fatalf("GET /metrics: %d", resp.StatusCode)
		}
		return string(readAll(t, resp))
	}
	body := scrape()
	for _, want := range []string{
		`gonixl_proxy_requests_total{route="/v1/completions",status="200"} 3`,
		`gonixl_proxy_requests_total{route="other",status="404"} 1`,
		`gonixl_proxy_retries_total{reason="decode_refused"} 3`,
		`gonixl_proxy_retries_total{reason="decode_unreachable"} 0`,
		`gonixl_proxy_retries_total{reason="prefill_failed"} 0`,
		`gonixl_proxy_retries_total{reason="decode_kv_failed"} 0`,
		`gonixl_proxy_leg_duration_seconds_count{leg="prefill",result="ok"} 3`,
		`gonixl_proxy_leg_duration_seconds_count{leg="decode",result="ok"} 3`,
		`gonixl_proxy_leg_duration_seconds_count{leg="decode",result="error"} 3`,
		`gonixl_proxy_ttft_seconds_count{stream="false"} 2`,
		`gonixl_proxy_ttft_seconds_count{stream="true"} 1`,
		`gonixl_proxy_engines_in_rotation{role="prefill"} 1`,
		`gonixl_proxy_engines_in_rotation{role="decode"} 2`,
		"go_goroutines ",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("GET /metrics lacks %q", want)
			t.Log(body)
		}
	}
	// The scrape itself is counted, by the next one.
	if body := scrape(); !strings.Contains(body, `gonixl_proxy_requests_total{route="/metrics",status="200"} 1`+"\n") {
		t.Errorf("the first scrape is not counted:\n%s", body)
	}
}

// The chat route's TTFT counts from when the proxy got the request: its
// observation is at most the wall interval the test saw around the request
// (it once counted from the zero time, about 292 years).
func TestChatTTFTCountsFromTheRequest(t *testing.T) {
	for _, conn := range []string{ConnectorPull, ConnectorPush} {
		t.Run(conn, func(t *testing.T) {
			pf := newFake(t, "prefill", conn, nil)
			df := newFake(t, "decode", conn, nil)
			h := newHarness(t, Config{Connector: conn, HealthInterval: time.Hour}, []*fake{pf}, []*fake{df})
			body := `{"model":"toy","messages":[{"role":"user","content":"hi"}],"max_tokens":4,"stream":false}`
			before := time.Now()
			resp, err := http.Post(h.front.URL+chatPath, "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			if b := readAll(t, resp); resp.StatusCode != 200 {
				t.Fatalf("chat: %d %s", resp.StatusCode, b)
			}
			wall := time.Since(before).Seconds()
			count, sum := ttftObserved(t, h.p, "false")
			if count != 1 {
				t.Fatalf("ttft count %d, want 1", count)
			}
			if sum <= 0 || sum > wall {
				t.Fatalf("ttft sum %v s, want in (0, %v] (the request's wall interval)", sum, wall)
			}
		})
	}
}

// ttftObserved returns gonixl_proxy_ttft_seconds' count and sum for stream.
func ttftObserved(t *testing.T, p *Proxy, stream string) (uint64, float64) {
	t.Helper()
	mfs, err := p.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "gonixl_proxy_ttft_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "stream" && l.GetValue() == stream {
					return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
				}
			}
		}
	}
	return 0, 0
}
