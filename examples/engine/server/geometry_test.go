package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gonixl/gonixl/examples/engine/server"
)

// A prefill and a decode engine of different KV geometry (4 layers against
// 2) are a deployment mistake, not a bad request: decode answers 502
// server_error naming both engines and the field that differs, on pull and
// on push.
func TestGeometryMismatchIs502(t *testing.T) {
	for _, conn := range []string{server.ConnPull, server.ConnPush} {
		t.Run(conn, func(t *testing.T) {
			m := tiny
			m.Layers = 4
			p := newPair(t, conn, opts{prefillModel: &m})
			deploymentError(t, p, conn, "NumLayers differ: source 4, destination 2")
		})
	}
}

// Engines in vLLM's protocol whose compatibility hashes differ (here their
// vLLM versions) are a deployment mistake too: decode, which asks
// prefill's side channel in pull and in push, answers 502 naming both
// hashes, not a 400 that tells the client to pass the Params unchanged.
func TestVLLMHashMismatchIs502(t *testing.T) {
	for _, conn := range []string{server.ConnPull, server.ConnPush} {
		t.Run(conn, func(t *testing.T) {
			p := newPair(t, conn, opts{configure: func(role string, c *server.Config) {
				c.Protocol, c.AttentionBackend, c.VLLMVersion = server.ProtocolVLLM, "FLASH_ATTN", "0.34.0"
				if role == server.RoleDecode {
					c.VLLMVersion = "0.33.0"
				}
			}})
			deploymentError(t, p, conn, "compatibility hash")
		})
	}
}

// deploymentError sends a request through p (prefill, then decode with
// prefill's Params; push: decode with prefill's coordinates) and checks
// decode's answer is a 502 server_error naming both engines and want.
func deploymentError(t *testing.T, p *pair, conn, want string) {
	t.Helper()
	body := req("hello there", 4)
	var kv map[string]any
	if conn == server.ConnPull {
		pre := with(with(with(body, "max_tokens", 1), "stream", false), "kv_transfer_params", map[string]any{"do_remote_decode": true})
		kv = p.complete(t, p.prefill.URL(), "geo", pre).KVTransferParams
	} else {
		// Push decode refuses at registration, before prefill runs.
		info := p.prefill.Info()
		kv = map[string]any{"do_remote_prefill": true, "remote_engine_id": info.EngineID, "remote_host": info.SideChannelHost,
			"remote_port": info.SideChannelPort, "tp_size": info.TPSize, "pp_size": info.PPSize, "transfer_mode": "push", "transfer_id": "t-geo"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, _ := json.Marshal(with(body, "kv_transfer_params", kv))
	r, _ := http.NewRequestWithContext(ctx, http.MethodPost, p.decode.URL()+"/v1/completions", bytes.NewReader(b))
	r.Header.Set("X-Request-Id", "geo")
	resp, err := p.client.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var e struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    int     `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(out, &e); err != nil {
		t.Fatalf("%d %s", resp.StatusCode, out)
	}
	if resp.StatusCode != http.StatusBadGateway || e.Error.Code != 502 || e.Error.Type != "server_error" || e.Error.Param != nil {
		t.Fatalf("want 502 server_error with no param, got %d %s", resp.StatusCode, out)
	}
	if testing.Verbose() {
		t.Log(e.Error.Message)
	}
	for _, w := range []string{`decode engine "decode"`, `prefill engine "prefill"`, want, "start both engines with the same model"} {
		if !strings.Contains(e.Error.Message, w) {
			t.Errorf("message lacks %q: %s", w, e.Error.Message)
		}
	}
	if strings.Contains(e.Error.Message, "pass on the prefill answer") {
		t.Errorf("message gives the client advice that does not apply: %s", e.Error.Message)
	}
}

// GET /kv_transfer_info carries the KV geometry that decides whether two
// engines can exchange KV (the proxy compares it before it pairs them);
// block size and TP size are outside it: the connectors map them.
func TestKVTransferInfoCarriesGeometry(t *testing.T) {
	swa, _, _ := server.Preset("swa-demo")
	for _, tc := range []struct {
		name string
		o    opts
		want string
	}{
		{"tiny", opts{}, `{"layers":2,"kv_heads":4,"head_dim":8,"dtype":"bfloat16","dtype_bytes":2,"mla":false,"kv_packed":false}`},
		{"groups", opts{prefillModel: &swa, decodeModel: &swa},
			`{"layers":4,"kv_heads":4,"head_dim":64,"dtype":"bfloat16","dtype_bytes":2,"mla":false,"kv_packed":false,` +
				`"groups":[{"kind":"full","layers":2},{"kind":"sliding_window","layers":2,"window":128}]}`},
		{"vllm", opts{configure: func(role string, c *server.Config) {
			c.Protocol, c.AttentionBackend, c.VLLMVersion = server.ProtocolVLLM, "FLASH_ATTN", "0.34.0"
		}}, `{"layers":2,"kv_heads":4,"head_dim":8,"dtype":"bfloat16","dtype_bytes":2,"mla":false,"kv_packed":true}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, server.ConnPull, tc.o)
			for _, s := range []*server.Server{p.prefill, p.decode} {
				resp, err := p.client.Get(s.URL() + "/kv_transfer_info")
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				var info struct {
					Geometry json.RawMessage `json:"kv_geometry"`
				}
				if err := json.Unmarshal(b, &info); err != nil {
					t.Fatalf("%s: %v: %s", s.Info().Role, err, b)
				}
				if string(info.Geometry) != tc.want {
					t.Errorf("%s: kv_geometry %s, want %s", s.Info().Role, info.Geometry, tc.want)
				}
			}
		})
	}
}
