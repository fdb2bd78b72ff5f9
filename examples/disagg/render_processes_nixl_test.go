//go:build nixl

package main

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/examples/completions"
	"github.com/gonixl/gonixl/examples/stack"
)

// The render tier as a user runs it, docs/serving.md: a render server
// (examples/render), tokens-only prefill and decode engines over NIXL UCX
// and the proxy with -render, four processes on 127.0.0.1, for each
// connector. Each streamed chat completion must answer as a decode engine
// that runs the same chat pipeline in process answers the same request
// alone (its reply follows from the KV it holds), reasoning and tool calls
// split alike, with decode's KV verified and moved by NIXL.
func TestRenderTierProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts processes")
	}
	bin := t.TempDir()
	_, err := stack.BuildPrograms(context.Background(), bin)
	require.NoError(t, err)
	out, err := exec.Command("go", "build", "-o", filepath.Join(bin, "render"), "github.com/gonixl/gonixl/examples/render").CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, connector := range []string{"pull", "push"} {
		t.Run(connector, func(t *testing.T) { runRenderTierProcesses(t, bin, connector) })
	}
}

func runRenderTierProcesses(t *testing.T, bin, connector string) {
	env := []string{"UCX_NET_DEVICES=lo", "NIXL_LOG_LEVEL=ERROR", "UCX_LOG_LEVEL=error", "UCX_ERROR_SIGNALS="}
	model := []string{"-model", "qwen2.5-7b", "-layers", "4", "-head-dim", "64", "-tp", "2", "-num-blocks", "256",
		"-served-model-name", demoModel.Name, "-agent", "nixl", "-connector", connector, "-connector-log=false", "-demo-replies"}
	render := start(t, bin, "render", env, "-port", "0")
	renderAddr := logged(t, render, "render server listening", "addr")
	waitHealthy(t, "http://"+renderAddr+"/health")
	prefill := start(t, bin, "engine", env, append(model, "-role", "prefill", "-tokens-only", "-port", "0", "-side-channel-port", "0")...)
	decode := start(t, bin, "engine", env, append(model, "-role", "decode", "-tokens-only", "-port", "0", "-side-channel-port", "0")...)
	// A decode engine with the chat pipeline in process, which serves a
	// chat request alone (no kv_transfer_params: prefilled locally).
	local := start(t, bin, "engine", env, append(model, "-role", "decode", "-chat-pipeline", "-port", "0", "-side-channel-port", "0")...)
	prefillURL, decodeURL, localURL := logged(t, prefill, "ready", "url"), logged(t, decode, "ready", "url"), logged(t, local, "ready", "url")
	for _, u := range []string{prefillURL, decodeURL, localURL} {
		waitHealthy(t, u+"/health")
	}
	proxy := start(t, bin, "proxy", env, "-port", "0", "-connector", connector, "-render", renderAddr,
		"-prefill", strings.TrimPrefix(prefillURL, "http://"), "-decode", strings.TrimPrefix(decodeURL, "http://"))
	proxyURL := "http://" + logged(t, proxy, "listening", "addr")
	waitHealthy(t, proxyURL+"/healthcheck")

	ctx := context.Background()
	const n = 6
	var reasoned, tools int
	for i := range n {
		body := renderChatBody(demoModel.Name, i, 48, 64)
		gs, got := completions.StreamReply(ctx, http.DefaultClient, proxyURL, fmt.Sprintf("tier-%s-%d", connector, i), body)
		require.NoError(t, gs.Err, "through the render tier")
		ws, want := completions.StreamReply(ctx, http.DefaultClient, localURL, fmt.Sprintf("local-%s-%d", connector, i), body)
		require.NoError(t, ws.Err, "in process")
		assert.Equal(t, want, got, "request %d: the render tier answers as the chat pipeline in process", i)
		if len(got.ToolCalls) > 0 {
			tools++
		} else if strings.TrimSpace(got.Reasoning) != "" {
			reasoned++
		}
	}
	mover := decodeURL
	if connector == "push" {
		mover = prefillURL
	}
	assert.GreaterOrEqual(t, transfers(t, mover+"/metrics"), float64(n), "the KV moved through NIXL")
	assert.Zero(t, metricSum(t, decodeURL+"/metrics", "gonixl_engine_kv_verify_failures_total"), "decode verified every request's KV")
	assert.Positive(t, metricSum(t, decodeURL+"/metrics", "gonixl_engine_kv_bytes_verified_total"))
	t.Logf("%s: %d streamed chat completions through render, tokens-only P/D over NIXL UCX and derender, equal to the pipeline in process (%d reasoned, %d tool calls)", connector, n, reasoned, tools)
}
