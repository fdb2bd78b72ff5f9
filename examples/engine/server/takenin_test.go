package server_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"testing"

	"github.com/gonixl/gonixl/examples/engine/server"
)

// A decode leg that asks (server.TakenInHeader) is told with a 103 carrying the header
// before the engine takes it in; a leg that does not ask, and a local request, get no 1xx
// answer; the final answer does not repeat the header.
func TestDecodeLegAnnouncesTakenIn(t *testing.T) {
	p := newPair(t, server.ConnPull, opts{})
	info := p.prefill.Info()
	decodeLeg := fmt.Sprintf(`{"model":"tiny","prompt":[1],"max_tokens":1,"kv_transfer_params":{"do_remote_prefill":true,"remote_engine_id":%q,"remote_host":%q,"remote_port":%d,"remote_request_id":"nothing-held","remote_block_ids":[0],"tp_size":2}}`,
		info.EngineID, info.SideChannelHost, info.SideChannelPort)
	local := `{"model":"tiny","prompt":[1],"max_tokens":1}`
	for _, tc := range []struct {
		name, body string
		ask        bool
		want103    int
	}{
		{"decode leg, asked", decodeLeg, true, 1},
		{"decode leg, not asked", decodeLeg, false, 0},
		{"local request, asked", local, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got103 := 0
			ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
				if code == http.StatusEarlyHints && h.Get(server.TakenInHeader) == "1" {
					got103++
				}
				return nil
			}})
			req, _ := http.NewRequestWithContext(ctx, "POST", p.decode.URL()+"/v1/completions", strings.NewReader(tc.body))
			if tc.ask {
				req.Header.Set(server.TakenInHeader, "1")
			}
			resp, err := p.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if got103 != tc.want103 || resp.Header.Get(server.TakenInHeader) != "" {
				t.Fatalf("%d 103 answers (final %d, header %q), want %d and no header on the final answer", got103, resp.StatusCode, resp.Header.Get(server.TakenInHeader), tc.want103)
			}
		})
	}
	idle(t, p)
}
