package pd_test

import (
	"encoding/json"
	"strings"
	"testing"
)

// Engines deployed with different KV geometry (prefill 4 layers, decode 2)
// are the operator's mistake: the client gets a 5xx naming both engines and
// the field that differs, not a 400 that blames its request.
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
			for _, want := range []string{"decode engine " + st.dec.URL(), "prefill engine " + st.pre.URL(),
				`decode engine "decode-` + conn + `"`, `prefill engine "prefill-` + conn + `"`, "NumLayers differ: source 4, destination 2"} {
				if !strings.Contains(e.Error.Message, want) {
					t.Errorf("message lacks %q: %s", want, e.Error.Message)
				}
			}
		})
	}
}
