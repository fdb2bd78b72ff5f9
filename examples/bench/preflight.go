package main

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"time"
)

// preflightConfig is the check the disaggregation guide asks for before a
// benchmark: the path works end to end, and KV transfers take what they
// should.
type preflightConfig struct {
	BaseURL     string // the proxy
	Model       string
	EngineURLs  []string // engines whose /metrics carry the transfer metrics (decode for pull, prefill for push; both is fine)
	LongPrompts int
	LongLen     int
	Timeout     time.Duration
	Out         io.Writer
}

// slowTransfer is the mean transfer time per request above which preflight
// warns: on NVLink or RDMA a request's KV moves in milliseconds to tens of
// milliseconds; hundreds mean TCP, a missing transport, or fragmented
// descriptors.
const slowTransfer = 100 * time.Millisecond

// preflight sends one short request, then LongPrompts long ones one at a
// time, and reports the engines' KV transfer metrics over the long ones. It
// returns an error if a request fails; a slow transfer is a warning.
func preflight(ctx context.Context, cfg preflightConfig) error {
	out := cfg.Out
	rc := runConfig{BaseURL: cfg.BaseURL, Model: cfg.Model, InputLen: 16, OutputLen: 4, NumPrompts: 1, RequestRate: 1, RequestTimeout: cfg.Timeout, Seed: 4242}
	s, _, err := benchRun(ctx, rc)
	if err != nil {
		return err
	}
	if s[0].Err != nil {
		return fmt.Errorf("preflight: a short request through %s failed: %w", cfg.BaseURL, s[0].Err)
	}
	fmt.Fprintf(out, "preflight: short request OK (TTFT %.1f ms, %d tokens)\n", ms(s[0].TTFT), s[0].OutputTokens)
	before := make([]transferStats, len(cfg.EngineURLs))
	for i, u := range cfg.EngineURLs {
		if before[i], err = scrapeTransfers(ctx, u); err != nil {
			return fmt.Errorf("preflight: %w", err)
		}
	}
	rc.InputLen, rc.OutputLen = cfg.LongLen, 8
	for i := range cfg.LongPrompts {
		rc.Seed = 4343 + uint64(i)
		s, _, err := benchRun(ctx, rc)
		if err != nil {
			return err
		}
		if s[0].Err != nil {
			return fmt.Errorf("preflight: long request %d (%d tokens) failed: %w", i, cfg.LongLen, s[0].Err)
		}
		fmt.Fprintf(out, "preflight: long request %d of %d tokens OK (TTFT %.1f ms)\n", i+1, cfg.LongLen, ms(s[0].TTFT))
	}
	var total transferStats
	for i, u := range cfg.EngineURLs {
		after, err := scrapeTransfers(ctx, u)
		if err != nil {
			return fmt.Errorf("preflight: %w", err)
		}
		d := after.sub(before[i])
		if !d.HaveHistograms {
			fmt.Fprintf(out, "preflight: %s exports no NIXL transfer metrics (vllm:nixl_xfer_time_seconds)\n", u)
		}
		total = total.add(d)
	}
	if total.Transfers == 0 {
		fmt.Fprintf(out, "preflight: WARNING: no KV transfer was recorded over %d long requests: is the proxy disaggregating?\n", cfg.LongPrompts)
		return nil
	}
	perReq := time.Duration(total.XferSeconds / float64(cfg.LongPrompts) * float64(time.Second))
	meanXfer, descs, bytes := total.mean()
	fmt.Fprintf(out, "KV Transfer metrics: %d transfers (%.1f per request), avg xfer time %.2f ms, %.0f descriptors and %.1f MiB per transfer, %d failed\n",
		total.Transfers, float64(total.Transfers)/float64(cfg.LongPrompts), ms(meanXfer), descs, bytes/(1<<20), int(total.FailedXfers))
	fmt.Fprintf(out, "preflight: average transfer time per request (all ranks' transfers summed): %.2f ms\n", ms(perReq))
	if meanXfer >= slowTransfer || perReq >= slowTransfer {
		fmt.Fprintf(out, "preflight: WARNING: KV transfers take hundreds of milliseconds: check the transport (UCX_PROTO_INFO=y), the NICs and descriptor fragmentation before benchmarking\n")
	}
	return nil
}

// gpuPeerStatus returns nvidia-smi's peer-to-peer matrix on a GPU host, or
// "" when there is no nvidia-smi.
func gpuPeerStatus(ctx context.Context) string {
	path, err := exec.LookPath("nvidia-smi")
	if err != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var b strings.Builder
	for _, args := range [][]string{{"topo", "-p2p", "r"}, {"topo", "-m"}} {
		outp, err := exec.CommandContext(ctx, path, args...).CombinedOutput()
		fmt.Fprintf(&b, "$ nvidia-smi %s\n%s", strings.Join(args, " "), outp)
		if err != nil {
			fmt.Fprintf(&b, "(%v)\n", err)
		}
	}
	return b.String()
}
