package stack

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/gonixl/gonixl/examples/engine/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A collocated stack: two engines (the split's count), each prefilling and
// decoding its own requests; requests in flight at once are spread over
// both, streams come through the balancer, and no KV moves.
func TestCollocatedStack(t *testing.T) {
	s, err := Start(Config{Mode: ModeCollocated, Model: tiny, NumBlocks: 64,
		Compute: server.ComputeModel{PrefillBase: 20e6, DecodeBase: 2e6}}) // 20 ms, 2 ms: requests overlap
	require.NoError(t, err)
	defer s.Close()
	require.Len(t, s.Engines, DefaultReplicas)
	assert.Nil(t, s.Prefill)
	assert.Nil(t, s.Proxy)

	resp, err := http.Get(s.URL() + "/healthcheck")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode)

	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body, _ := json.Marshal(map[string]any{"model": "tiny", "prompt": "one two three four", "max_tokens": 5, "stream": true, "ignore_eos": true})
			resp, err := http.Post(s.URL()+"/v1/completions", "application/json", bytes.NewReader(body))
			if !assert.NoError(t, err) {
				return
			}
			out, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			assert.Equal(t, 200, resp.StatusCode, "%s", out)
			assert.Contains(t, string(out), "data: [DONE]")
			assert.GreaterOrEqual(t, strings.Count(string(out), `"text"`), 5, "%s", out)
		}()
	}
	wg.Wait()
	for i, e := range s.Engines {
		st := e.Stats()
		assert.Equal(t, uint64(2), st.RequestsDone, "engine %d: 4 requests at once, least in flight first", i)
		assert.Zero(t, st.KVBytesVerified, "no KV moved")
	}
	require.NoError(t, s.Close())
	assert.NoError(t, s.Close(), "a second Close")
}

func TestCollocatedReplicas(t *testing.T) {
	s, err := Start(Config{Mode: ModeCollocated, Model: tiny, NumBlocks: 64, Replicas: 1})
	require.NoError(t, err)
	assert.Len(t, s.Engines, 1)
	require.NoError(t, s.Close())
	_, err = Start(Config{Mode: ModeCollocated, Model: tiny, Replicas: -1})
	assert.EqualError(t, err, "stack: Config.Replicas is -1, want > 0")
}

func TestBalancerPicksTheLeastLoaded(t *testing.T) {
	b, err := newBalancer([]string{"http://a", "http://b", "http://c"})
	require.NoError(t, err)
	assert.Equal(t, 0, b.pick())
	assert.Equal(t, 1, b.pick())
	assert.Equal(t, 2, b.pick())
	b.inflight[1].Add(-1) // b's request ended
	assert.Equal(t, 1, b.pick())
	b.inflight[0].Add(-1)
	b.inflight[2].Add(-1)
	assert.Equal(t, 2, b.pick(), "ties go to the next in rotation")
}
