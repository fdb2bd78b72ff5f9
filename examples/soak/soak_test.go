package main

import (
	"context"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The expected text, computed from docs/kvfill.md, is what an engine of
// the soak's shape answers (here: a prompt served locally by one engine, as
// the stack's decode derives its text from the KV it received), for
// completions and chats, streamed and not; another prompt gives other text.
func TestExpectedTextIsTheEngines(t *testing.T) {
	s, err := startInproc("pull", defaultShape)
	require.NoError(t, err)
	defer s.Close()
	c := &client{http: &http.Client{}, model: defaultShape.ServedModel, geom: defaultShape.geometry(), deadline: time.Minute}
	for _, k := range []call{
		{Prompt: "The quick  brown\tfox", MaxTokens: 5},
		{Prompt: "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen", MaxTokens: 9, Stream: true},
		{Prompt: "hello there", MaxTokens: 3, Chat: true},
		{Prompt: "hello there", MaxTokens: 4, Chat: true, Stream: true},
	} {
		k.Behave = behaveNormal
		r := c.do(context.Background(), s.EngineURL(partDecode), k) // no kv_transfer_params: served locally
		assert.Equal(t, outOK, r.Outcome, "%+v: %s", k, r.Cause)
	}
	g := defaultShape.geometry()
	assert.NotEqual(t, expectedText(g, "The quick brown fox", 5), expectedText(g, "The quick brown dog", 5))
	assert.Len(t, strings.Fields(expectedText(g, "a b", 7)), 7)
}

// The short soak, in-process (loopback agents, real HTTP): every kind of
// step on every stack (pull, push, push-progressive), one idle gap past every idle timeout, a kill and
// restart of each part; every check must pass. It runs with the package's
// tests (about 1.5 minutes, 2 with -race on a busy 2-core machine; -short
// skips it). Nothing in it is timed: its deadlines (each call's, the idle
// points' free-block wait, the wait for the proxy's rotation) only bound a
// hang. Built with -tags nixl, where the in-process stack is the same, it
// is the process-mode soak instead (engines and proxy as programs, NIXL
// over UCX on lo), run only with GONIXL_SOAK=1:
//
//	GONIXL_SOAK=1 go test -tags nixl -count=1 -timeout 20m -run TestShortSoak ./examples/soak/
func TestShortSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("the short soak takes about 1.5 minutes; it runs without -short")
	}
	mode := modeInproc
	if nixlBuild {
		if os.Getenv("GONIXL_SOAK") != "1" {
			t.Skip("built with -tags nixl the short soak runs in process mode, with GONIXL_SOAK=1 (the in-process soak runs in the default build)")
		}
		mode = modeProcess
	}
	out := t.TempDir()
	var progress strings.Builder
	rep, err := run(context.Background(), Config{Seed: 1, Short: true, Mode: mode, Connectors: []string{stackPull, stackPush, stackPushProgressive},
		Out: out, Progress: &progress, Deadline: 3 * time.Minute})
	require.NoError(t, err)
	t.Log(progress.String())
	for _, f := range []string{"report.md", "report.json", "latency.png", "free_blocks.png", "rss.png"} {
		_, err := os.Stat(out + "/" + f)
		assert.NoError(t, err, f)
	}
	assert.Empty(t, rep.Failures)
	var calls, unanswered int
	for _, p := range rep.Phases {
		calls += len(p.Results)
		unanswered += p.counts()[outUnanswered]
	}
	assert.NotZero(t, calls)
	assert.Zero(t, unanswered)
	// push-progressive soaked progressive push, not plain push: its
	// prefill took reports (and refused none: a check of the run).
	assert.NotZero(t, rep.ProgressReports)
}
