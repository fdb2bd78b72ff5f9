package pd_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gonixl/gonixl/examples/engine/server"
	"github.com/gonixl/gonixl/examples/proxy/pd"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// The proxy in front of the simulated engines of examples/engine (loopback agents), both
// connectors, streaming and not: the engines accept what the proxy sends, and KV moves.
func TestWithSimulatedEngines(t *testing.T) {
	model := server.ModelSpec{Name: "tiny", Layers: 2, KVHeads: 4, HeadDim: 8, DTypeBytes: 2, DType: "bfloat16", BlockSize: 16, TPSize: 2}
	for _, conn := range []string{"pull", "push"} {
		t.Run(conn, func(t *testing.T) {
			fab, err := loopback.NewFabric()
			if err != nil {
				t.Fatal(err)
			}
			var engines []*server.Server
			mk := func(role string) *server.Server {
				s, err := server.New(server.Config{Role: role, Connector: conn, EngineID: role + "-" + conn, Model: model, NumBlocks: 64,
					NewAgent: func(name string) (nixl.Agent, error) { return fab.NewAgent(name) }})
				if err != nil {
					t.Fatal(err)
				}
				engines = append(engines, s)
				return s
			}
			pre, dec := mk(server.RolePrefill), mk(server.RoleDecode)
			p, err := pd.New(pd.Config{Prefill: []string{pre.URL()}, Decode: []string{dec.URL()}, HealthInterval: 100 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			front := httptest.NewServer(p)
			defer func() {
				front.Close()
				p.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				for _, s := range engines {
					if err := s.Close(ctx); err != nil {
						t.Error(err)
					}
				}
				fab.Close()
			}()
			if p.Connector() != conn {
				t.Fatalf("connector %q", p.Connector())
			}
			post := func(body string) *http.Response {
				resp, err := front.Client().Post(front.URL+"/v1/completions", "application/json", strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				return resp
			}
			resp := post(`{"model":"tiny","prompt":"the quick brown fox jumps over the lazy dog, twice over","max_tokens":5}`)
			var c struct {
				Choices []struct {
					Text         string `json:"text"`
					FinishReason string `json:"finish_reason"`
				} `json:"choices"`
				Usage struct {
					CompletionTokens int `json:"completion_tokens"`
				} `json:"usage"`
			}
			err = json.NewDecoder(resp.Body).Decode(&c)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 || len(c.Choices) != 1 || c.Usage.CompletionTokens != 5 {
				t.Fatalf("status %d, %+v, %v", resp.StatusCode, c, err)
			}

			resp = post(`{"model":"tiny","prompt":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18],"max_tokens":4,"stream":true,"stream_options":{"include_usage":true}}`)
			defer resp.Body.Close()
			if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
				t.Fatalf("stream: status %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			sc := bufio.NewScanner(resp.Body)
			var data []string
			for sc.Scan() {
				if l := sc.Text(); strings.HasPrefix(l, "data: ") {
					data = append(data, strings.TrimPrefix(l, "data: "))
				}
			}
			if len(data) < 2 || data[len(data)-1] != "[DONE]" {
				t.Fatalf("stream: %q", data)
			}
			resp.Body.Close()

			// Concurrent requests: each decode leg finds its own prefill's KV.
			var wg sync.WaitGroup
			for i := range 24 {
				wg.Go(func() {
					stream := i%2 == 0
					body := fmt.Sprintf(`{"model":"tiny","prompt":"request %d says hello to the engines","max_tokens":3,"stream":%v}`, i, stream)
					req, _ := http.NewRequest(http.MethodPost, front.URL+"/v1/completions", strings.NewReader(body))
					req.Header.Set("X-Request-Id", fmt.Sprintf("conc-%d", i))
					resp, err := front.Client().Do(req)
					if err != nil {
						t.Error(err)
						return
					}
					defer resp.Body.Close()
					b, _ := io.ReadAll(resp.Body)
					if resp.StatusCode != 200 || (stream && !strings.HasSuffix(string(b), "data: [DONE]\n\n")) {
						t.Errorf("request %d: %d %s", i, resp.StatusCode, b)
					}
				})
			}
			wg.Wait()
			if s := p.Stats(); s.Requests != 26 || s.Failed != 0 || s.Retried != 0 {
				t.Fatalf("stats %+v", s)
			}
		})
	}
}
