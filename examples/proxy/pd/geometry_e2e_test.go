package pd_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gonixl/gonixl/examples/engine/server"
)

// Engines deployed with different KV geometry (prefill 4 layers, decode 2)
// are the operator's mistake: the proxy, which read both engines' geometry
// on GET /kv_transfer_info, answers 502 naming both engines and the field
// that differs, not a 400 that blames the request, and sends neither leg.
func TestGeometryMismatchThroughProxy(t *testing.T) {
	for _, conn := range []string{"pull", "push"} {
		t.Run(conn, func(t *testing.T) {
			four := tinyModel
			four.Layers = 4
			st := newStackOf(t, conn, four, tinyModel)
			resp, body := st.post(t, "/v1/completions", "geo-"+conn, `{"model":"tiny","prompt":"hello","max_tokens":4}`)
			var e struct {
				Error struct {
					Message string `json:"message"`
					Type    string `json:"type"`
					Code    int    `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal([]byte(body), &e); err != nil {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			if resp.StatusCode != 502 || e.Error.Code != 502 || e.Error.Type != "server_error" {
				t.Fatalf("want 502 server_error, got %d %s", resp.StatusCode, body)
			}
			for _, want := range []string{`decode engine ` + st.dec.URL() + ` ("decode-` + conn + `")`,
				`prefill engine ` + st.pre.URL() + ` ("prefill-` + conn + `")`, "layers: prefill 4, decode 2"} {
				if !strings.Contains(e.Error.Message, want) {
					t.Errorf("message lacks %q: %s", want, e.Error.Message)
				}
			}
			for _, s := range []*server.Server{st.pre, st.dec} {
				if got := s.Stats(); got.RequestsDone+got.RequestsFailed+got.RequestsAborted != 0 {
					t.Errorf("%s engine got a request: %+v", s.Info().Role, got)
				}
			}
		})
	}
}
