package pd

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// geometryOf is a small model's KV geometry with the given layers.
func geometryOf(layers int) *KVGeometry {
	return &KVGeometry{Layers: layers, KVHeads: 4, HeadDim: 8, DType: "bfloat16", DTypeBytes: 2}
}

const geometryLog = "prefill and decode engines differ in KV geometry: no request goes to this pair"

// A prefill engine of 4 layers and a decode engine of 2 cannot exchange KV:
// the proxy says so once in its log, naming both engines and the field, and
// answers a request 502 with the same, without sending either leg.
func TestGeometryMismatchIs502BeforePrefill(t *testing.T) {
	for _, conn := range []string{ConnectorPull, ConnectorPush} {
		t.Run(conn, func(t *testing.T) {
			pf := newFake(t, "prefill", conn, nil)
			pf.geometry.Store(geometryOf(4))
			df := newFake(t, "decode", conn, nil)
			df.geometry.Store(geometryOf(2))
			core, logs := observer.New(zap.InfoLevel)
			h := newHarness(t, Config{Connector: conn, HealthInterval: time.Hour, Logger: zap.New(core)}, []*fake{pf}, []*fake{df})
			for range 3 { // the info is refreshed at every health check
				h.p.checkAll(context.Background(), h.p.connector)
			}
			resp := h.post(t, context.Background(), `{"model":"toy","prompt":"hello","max_tokens":4}`, nil)
			body := readAll(t, resp)
			if resp.StatusCode != http.StatusBadGateway {
				t.Fatalf("status %d %s, want 502", resp.StatusCode, body)
			}
			e, _ := decodeJSON(t, body)["error"].(map[string]any)
			msg, _ := e["message"].(string)
			if e["type"] != "server_error" || e["code"] != 502.0 {
				t.Errorf("error %v, want a 502 server_error", e)
			}
			for _, want := range []string{
				fmt.Sprintf("prefill engine %s (%q)", pf.srv.URL, pf.info.EngineID),
				fmt.Sprintf("decode engine %s (%q)", df.srv.URL, df.info.EngineID),
				"layers: prefill 4, decode 2",
			} {
				if !strings.Contains(msg, want) {
					t.Errorf("message lacks %q: %s", want, msg)
				}
			}
			if n, m := len(pf.requests()), len(df.requests()); n != 0 || m != 0 {
				t.Errorf("prefill got %d requests and decode %d, want none", n, m)
			}
			lines := logs.FilterMessage(geometryLog).All()
			if len(lines) != 1 {
				t.Fatalf("%d %q lines after 4 checks, want 1", len(lines), geometryLog)
			}
			got := lines[0].ContextMap()
			want := map[string]any{"prefill": pf.srv.URL, "prefill_engine_id": pf.info.EngineID,
				"decode": df.srv.URL, "decode_engine_id": df.info.EngineID, "differ": []any{"layers: prefill 4, decode 2"}}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("log fields %v, want %v", got, want)
			}
			if s := h.p.Stats(); s.Requests != 1 || s.Failed != 1 || s.Retried != 0 {
				t.Errorf("stats %+v", s)
			}
			hc, err := h.front.Client().Get(h.front.URL + "/healthcheck")
			if err != nil {
				t.Fatal(err)
			}
			if b := readAll(t, hc); hc.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), `"compatible_pair":false`) {
				t.Errorf("/healthcheck %d %s, want 503 with no compatible pair", hc.StatusCode, b)
			}
		})
	}
}

// An engine restarted with another model is compared again when its info
// is refreshed: the pair serves once the geometries agree, and a new
// mismatch is logged again.
func TestGeometryComparedAfterRefresh(t *testing.T) {
	pf := newFake(t, "prefill", "pull", nil)
	pf.geometry.Store(geometryOf(4))
	df := newFake(t, "decode", "pull", nil)
	df.geometry.Store(geometryOf(2))
	core, logs := observer.New(zap.InfoLevel)
	h := newHarness(t, Config{Connector: "pull", HealthInterval: time.Hour, Logger: zap.New(core)}, []*fake{pf}, []*fake{df})
	check := func() { h.p.checkAll(context.Background(), h.p.connector) }
	post := func() int {
		resp := h.post(t, context.Background(), `{"model":"toy","prompt":"hello","max_tokens":4}`, nil)
		readAll(t, resp)
		return resp.StatusCode
	}
	if s := post(); s != http.StatusBadGateway {
		t.Fatalf("mismatched: status %d, want 502", s)
	}
	df.geometry.Store(geometryOf(4))
	check()
	if s := post(); s != http.StatusOK {
		t.Fatalf("after decode came back with 4 layers: status %d, want 200", s)
	}
	if n := logs.FilterMessage("prefill and decode engines agree on KV geometry again").Len(); n != 1 {
		t.Errorf("%d 'agree again' lines, want 1", n)
	}
	df.geometry.Store(geometryOf(2))
	check()
	check()
	if s := post(); s != http.StatusBadGateway {
		t.Fatalf("after decode came back with 2 layers: status %d, want 502", s)
	}
	if n := logs.FilterMessage(geometryLog).Len(); n != 2 {
		t.Errorf("%d %q lines, want 2 (one per mismatch)", n, geometryLog)
	}
	if n := len(pf.requests()); n != 1 {
		t.Errorf("prefill got %d requests, want 1 (the one the matching pair served)", n)
	}
}

// With another engine that matches, the proxy uses it and never the one
// whose geometry differs; an engine that reports no geometry is not
// compared.
func TestGeometryPrefersMatchingPair(t *testing.T) {
	for _, conn := range []string{ConnectorPull, ConnectorPush} {
		for _, tc := range []struct {
			name             string
			prefill, decode  []*KVGeometry
			unusedP, unusedD int // index of the engine that must get nothing, -1 none
		}{
			{"decode", []*KVGeometry{geometryOf(4)}, []*KVGeometry{geometryOf(2), geometryOf(4)}, -1, 0},
			{"prefill", []*KVGeometry{geometryOf(2), geometryOf(4)}, []*KVGeometry{geometryOf(4)}, 0, -1},
			{"unreported", []*KVGeometry{geometryOf(4)}, []*KVGeometry{nil}, -1, -1},
		} {
			t.Run(conn+"/"+tc.name, func(t *testing.T) {
				var pfs, dfs []*fake
				for _, g := range tc.prefill {
					f := newFake(t, "prefill", conn, nil)
					f.geometry.Store(g)
					pfs = append(pfs, f)
				}
				for _, g := range tc.decode {
					f := newFake(t, "decode", conn, nil)
					f.geometry.Store(g)
					dfs = append(dfs, f)
				}
				h := newHarness(t, Config{Connector: conn, HealthInterval: time.Hour}, pfs, dfs)
				for i := range 4 {
					resp := h.post(t, context.Background(), `{"model":"toy","prompt":"hello","max_tokens":4}`, nil)
					if body := readAll(t, resp); resp.StatusCode != http.StatusOK {
						t.Fatalf("request %d: status %d %s", i, resp.StatusCode, body)
					}
				}
				for i, f := range pfs {
					if n := len(f.requests()); (i == tc.unusedP) != (n == 0) {
						t.Errorf("prefill %d (geometry %+v) got %d requests", i, tc.prefill[i], n)
					}
				}
				for i, f := range dfs {
					if n := len(f.requests()); (i == tc.unusedD) != (n == 0) {
						t.Errorf("decode %d (geometry %+v) got %d requests", i, tc.decode[i], n)
					}
				}
			})
		}
	}
}

// A proxy told to wait for its engines keeps waiting while the only pair
// differs in geometry (the operator may restart one with the right model),
// and its give-up error says why, though both engines are in rotation.
func TestStartWaitNamesGeometryMismatch(t *testing.T) {
	pf := newFake(t, "prefill", "pull", nil)
	pf.geometry.Store(geometryOf(4))
	df := newFake(t, "decode", "pull", nil)
	df.geometry.Store(geometryOf(2))
	_, err := New(Config{Prefill: []string{pf.srv.URL}, Decode: []string{df.srv.URL}, StartWait: 200 * time.Millisecond,
		HealthInterval: 50 * time.Millisecond})
	want := fmt.Sprintf("KV geometry: prefill engine %s (%q) and decode engine %s (%q) differ in KV geometry (layers: prefill 4, decode 2)",
		pf.srv.URL, pf.info.EngineID, df.srv.URL, df.info.EngineID)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want one with %q", err, want)
	}
}
