package server_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/examples/engine/server"
)

// longGen is a generate request that runs until aborted: no reply script,
// so it stops only at max_tokens, 4000 decode steps of 20 ms (80 s).
func longGen(stream bool) map[string]any {
	b := genReq(map[string]any{"max_tokens": 4000, "ignore_eos": true})
	b["stream"] = stream
	return b
}

func (p *pair) abort(t *testing.T, url string, body string) (int, string) {
	t.Helper()
	resp, err := p.client.Post(url+"/inference/v1/abort_requests", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func metric(t *testing.T, p *pair, url, line string) bool {
	t.Helper()
	resp, err := p.client.Get(url + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return bytes.Contains(b, []byte(line))
}

// abort_requests ends a running generate request, streamed or whole, with
// finish_reason "abort" and its blocks back; unknown ids are answered 200
// and counted; bodies that name no ids are 400 and counted; an engine that
// is not tokens-only refuses the endpoint, as vLLM's without scale-out.
func TestAbortRequests(t *testing.T) {
	for _, conn := range []string{"pull", "push"} {
		t.Run(conn, func(t *testing.T) {
			p := newPair(t, conn, opts{compute: server.ComputeModel{DecodeBase: 20 * time.Millisecond},
				configure: func(_ string, c *server.Config) { c.TokensOnly = true }})
			url := p.decode.URL()

			// Streamed: abort once the first token arrived.
			b, _ := json.Marshal(longGen(true))
			hr, _ := http.NewRequest("POST", url+"/inference/v1/generate", bytes.NewReader(b))
			hr.Header.Set("Content-Type", "application/json")
			hr.Header.Set("X-Request-Id", "s1")
			resp, err := p.client.Do(hr)
			require.NoError(t, err)
			defer resp.Body.Close()
			if resp.StatusCode != 200 {
				b, _ := io.ReadAll(resp.Body)
				t.Fatalf("generate: %d %s", resp.StatusCode, b)
			}
			br := bufio.NewReader(resp.Body)
			first, err := br.ReadString('\n')
			require.NoError(t, err)
			require.Contains(t, first, `"request_id":"generate-tokens-s1"`)
			code, body := p.abort(t, url, `{"request_ids": ["generate-tokens-s1", "generate-tokens-nobody"]}`)
			require.Equal(t, 200, code)
			require.Empty(t, body)
			rest, err := io.ReadAll(br)
			require.NoError(t, err)
			events := strings.Split(strings.TrimSpace(string(rest)), "\n\n")
			require.Equal(t, "data: [DONE]", events[len(events)-1])
			last := events[len(events)-2]
			require.Contains(t, last, `"finish_reason":"abort"`)
			require.Contains(t, last, `"token_ids":[]`)
			for _, e := range events[:len(events)-2] {
				assert.Contains(t, e, `"finish_reason":null`, "only the last event ends the stream")
			}

			// Whole: abort while it runs (a string id, as vLLM takes too).
			type result struct {
				g   genResponse
				err error
			}
			done := make(chan result, 1)
			go func() {
				b, _ := json.Marshal(longGen(false))
				hr, _ := http.NewRequest("POST", url+"/inference/v1/generate", bytes.NewReader(b))
				hr.Header.Set("Content-Type", "application/json")
				hr.Header.Set("X-Request-Id", "w1")
				resp, err := p.client.Do(hr)
				if err != nil {
					done <- result{err: err}
					return
				}
				defer resp.Body.Close()
				var g genResponse
				err = json.NewDecoder(resp.Body).Decode(&g)
				done <- result{g, err}
			}()
			require.Eventually(t, func() bool { return p.decode.Stats().Running == 1 }, 30*time.Second, time.Millisecond)
			code, _ = p.abort(t, url, `{"request_ids": "generate-tokens-w1"}`)
			require.Equal(t, 200, code)
			var r result
			select {
			case r = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("the aborted whole answer did not come")
			}
			require.NoError(t, r.err)
			require.Equal(t, "generate-tokens-w1", r.g.RequestID)
			require.Equal(t, "abort", r.g.Choices[0].FinishReason)
			require.Equal(t, len(r.g.Choices[0].TokenIDs), r.g.Usage.CompletionTokens)
			require.Less(t, r.g.Usage.CompletionTokens, 4000)

			require.Eventually(t, func() bool { st := p.decode.Stats(); return st.BlocksInUse == 0 && st.Running == 0 },
				30*time.Second, time.Millisecond, "the aborted requests' blocks came back")
			assert.Equal(t, uint64(2), p.decode.Stats().RequestsAborted)

			// Bad bodies: nothing aborted, counted.
			code, body = p.abort(t, url, `{"request_ids": 7}`)
			require.Equal(t, 400, code)
			require.Contains(t, body, `"param":"request_ids"`)
			require.Contains(t, body, "request_ids must be a request id or a list of request ids")
			code, body = p.abort(t, url, `not json`)
			require.Equal(t, 400, code)
			require.Contains(t, body, "JSON decode error: ")
			code, _ = p.abort(t, url, `{}`)
			require.Equal(t, 400, code)
			require.True(t, metric(t, p, url, `gonixl_engine_abort_request_ids_total{engine_id="decode",model_name="tiny",result="aborted"} 2`))
			require.True(t, metric(t, p, url, `gonixl_engine_abort_request_ids_total{engine_id="decode",model_name="tiny",result="unknown"} 1`))
			require.True(t, metric(t, p, url, `gonixl_engine_abort_request_ids_total{engine_id="decode",model_name="tiny",result="bad_request"} 3`))

			// The legacy path is the same endpoint.
			code, _ = p.abort(t, url, `{"request_ids": []}`)
			require.Equal(t, 200, code)
			resp2, err := p.client.Post(url+"/abort_requests", "application/json", strings.NewReader(`{"request_ids": "x"}`))
			require.NoError(t, err)
			resp2.Body.Close()
			require.Equal(t, 200, resp2.StatusCode)
		})
	}
}

func TestAbortRequestsNeedTokensOnly(t *testing.T) {
	p := newPair(t, "pull", opts{})
	for _, path := range []string{"/inference/v1/abort_requests", "/abort_requests"} {
		resp, err := p.client.Post(p.decode.URL()+path, "application/json", strings.NewReader(`{"request_ids": "a"}`))
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, 403, resp.StatusCode)
		require.Contains(t, string(b), "Scale-out endpoints are disabled: POST "+path+" is served only by a tokens-only engine")
	}
}
