package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gonixl/gonixl/examples/engine/server"
)

// A push prefill with progress reports whose client leaves while the
// prompt computes: the ranks that took a report hold the blocks, the
// engine aborts the request on them, and the blocks come back through
// their DrainFreed (idle checks every block is free on both engines).
func TestPrefillClientGoneAfterProgress(t *testing.T) {
	p := newPair(t, server.ConnPush, opts{
		compute: server.ComputeModel{PrefillPerToken: 2 * time.Millisecond},
		configure: func(role string, c *server.Config) {
			if role == server.RolePrefill {
				c.ProgressChunk = 16
			}
		},
	})
	long := strings.Repeat("alpha beta gamma delta ", 16) // 64 tokens: 3 reports before the finish
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Millisecond)
	defer cancel()
	b, _ := json.Marshal(with(req(long, 1), "kv_transfer_params", map[string]any{"do_remote_decode": true, "transfer_mode": "push"}))
	hr, _ := http.NewRequestWithContext(ctx, "POST", p.prefill.URL()+"/v1/completions", bytes.NewReader(b))
	if _, err := p.client.Do(hr); err == nil {
		t.Fatal("the request outlived its context")
	}
	eventually(t, "the abort counted", func() bool { return p.prefill.Stats().RequestsAborted == 1 })
	// The connector ranks were told (without progress nothing of the
	// request reached them).
	resp, err := p.client.Get(p.prefill.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile(`(?m)^\S*aborted_requests\S* (\S+)$`).FindSubmatch(metrics)
	if m == nil || string(m[1]) == "0" {
		t.Fatalf("prefill's connector counted no abort: %q", m)
	}
	idle(t, p)
}
