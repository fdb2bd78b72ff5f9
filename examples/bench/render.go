package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/gonixl/gonixl/examples/completions"
	"github.com/gonixl/gonixl/examples/engine/server"
	"github.com/gonixl/gonixl/examples/loadgen"
	"github.com/gonixl/gonixl/examples/render/chat"
	"github.com/gonixl/gonixl/examples/stack"
	"github.com/prometheus/client_golang/prometheus"
)

// -render-tier (docs/bench.md, "The render tier"): chat completions on the
// preset's stack in -mode twice, once with engines that run the chat
// pipeline in process and once through the render tier (a render server in
// process renders and derenders, the engines run tokens-only), the same
// prompts at the same arrivals. It reports each run's TTFT as the client
// saw it, and the render tier's own timings from the running stack: the
// proxy's render and derender hops (gonixl_proxy_leg_duration_seconds,
// leg "render" and "derender"; a stream's derender is the sum of its
// chunks'), per request.

// renderTierRun is one of the two runs.
type renderTierRun struct {
	name              string
	ttft              []time.Duration
	failed            int
	firstErr          error
	render, derender  hopTime
	verified, badKV   uint64
	reasoned, toolUse int
}

// hopTime is a hop's total time and count, from the proxy's histogram.
type hopTime struct {
	sum   float64
	count uint64
}

func (h hopTime) mean() time.Duration {
	if h.count == 0 {
		return 0
	}
	return time.Duration(h.sum / float64(h.count) * float64(time.Second))
}

// proxyHop reads the proxy's leg histogram for leg, result ok.
func proxyHop(reg *prometheus.Registry, leg string) hopTime {
	mfs, err := reg.Gather()
	if err != nil {
		return hopTime{}
	}
	for _, mf := range mfs {
		if mf.GetName() != "gonixl_proxy_leg_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["leg"] == leg && labels["result"] == "ok" {
				return hopTime{sum: m.GetHistogram().GetSampleSum(), count: m.GetHistogram().GetSampleCount()}
			}
		}
	}
	return hopTime{}
}

// chatBenchBody is the chat request of prompt text: max_tokens out,
// ignore_eos (as vllm bench serve sends), tools on every other request.
func chatBenchBody(model, prompt string, out int, tools bool) []byte {
	m := map[string]any{"model": model, "max_tokens": out, "ignore_eos": true, "stream": true,
		"stream_options": map[string]any{"include_usage": true},
		"messages":       []map[string]any{{"role": "user", "content": prompt}}}
	if tools {
		m["tools"] = json.RawMessage(`[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]`)
	}
	b, _ := json.Marshal(m)
	return b
}

func runRenderTier(ctx context.Context, o options, p preset, stdout io.Writer) error {
	if o.baseURL != "" {
		return fmt.Errorf("-render-tier starts its own stacks; drop -base-url")
	}
	if err := checkMode(o.mode); err != nil || o.mode == stack.ModeCollocated {
		return fmt.Errorf("-render-tier needs a split -mode (pull, pull-inline, push), got %q", o.mode)
	}
	rate, err := parseRate(o.rate)
	if err != nil {
		return err
	}
	pipe, err := chat.New(chat.Config{})
	if err != nil {
		return err
	}
	replies := server.ReplyScript(pipe, server.DemoReplyTexts)
	prompts := randomPrompts(o.numPrompts, o.inputLen, o.seed)
	var runs []renderTierRun
	for _, tier := range []bool{false, true} {
		r := renderTierRun{name: map[bool]string{false: "in process", true: "render tier"}[tier]}
		s, closeStack, err := startPresetStack(p, o.mode, o.agents == "nixl", "render", func(c *stack.Config) {
			c.Chat, c.Render, c.Replies = pipe, tier, replies
			c.NumBlocks = max(c.NumBlocks, 1024)
		})
		if err != nil {
			return err
		}
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024, IdleConnTimeout: 30 * time.Second}}
		one := func(id, prompt string, tools bool) (completions.Sample, completions.Reply) {
			rctx, cancel := context.WithTimeout(ctx, o.timeout)
			defer cancel()
			return completions.StreamReply(rctx, client, s.URL(), id, chatBenchBody(p.Model.Name, prompt, o.outputLen, tools))
		}
		for i := range o.warmups {
			if smp, _ := one(fmt.Sprintf("render-warmup-%d", i), prompts[i%len(prompts)], false); smp.Err != nil {
				closeStack()
				return fmt.Errorf("%s: warm-up: %w", r.name, smp.Err)
			}
		}
		renderBefore, derenderBefore := proxyHop(s.Proxy.Registry(), "render"), proxyHop(s.Proxy.Registry(), "derender")
		before := s.Decode.Stats()
		samples := make([]completions.Sample, len(prompts))
		answers := make([]completions.Reply, len(prompts))
		var wg sync.WaitGroup
		lr := rate
		if lr > 1e300 {
			lr = 0
		}
		lerr := loadgen.Run(ctx, loadgen.Arrivals{Rate: lr, Poisson: true, Seed: int64(o.seed)}, len(prompts), func(i int) {
			wg.Go(func() { samples[i], answers[i] = one(fmt.Sprintf("render-%d", i), prompts[i], i%2 == 1) })
		})
		wg.Wait()
		after := s.Decode.Stats()
		r.verified, r.badKV = after.KVBytesVerified-before.KVBytesVerified, after.KVVerifyFailures-before.KVVerifyFailures
		ra, da := proxyHop(s.Proxy.Registry(), "render"), proxyHop(s.Proxy.Registry(), "derender")
		r.render = hopTime{ra.sum - renderBefore.sum, ra.count - renderBefore.count}
		r.derender = hopTime{da.sum - derenderBefore.sum, da.count - derenderBefore.count}
		for i, smp := range samples {
			if smp.Err != nil {
				r.failed++
				if r.firstErr == nil {
					r.firstErr = smp.Err
				}
				continue
			}
			r.ttft = append(r.ttft, smp.TTFT)
			if len(answers[i].ToolCalls) > 0 {
				r.toolUse++
			} else if answers[i].Reasoning != "" {
				r.reasoned++
			}
		}
		if err := closeStack(); err != nil {
			return err
		}
		if lerr != nil {
			return lerr
		}
		runs = append(runs, r)
	}
	fmt.Fprintf(stdout, "Render tier: %s, mode %s; %d chat requests at %s/s, %d prompt words, %d output tokens (ignore_eos), tools on every other request\n\n",
		p.Description, o.mode, o.numPrompts, o.rate, o.inputLen, o.outputLen)
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "chat\tdone\tKV mismatches\treasoning\ttool calls\tTTFT mean\tTTFT p50\tTTFT p99\trender hop mean\tderender per request\t")
	for _, r := range runs {
		hops := "-\t-"
		if r.render.count > 0 {
			hops = fmt.Sprintf("%v\t%v", r.render.mean().Round(time.Microsecond), r.derender.mean().Round(time.Microsecond))
		}
		fmt.Fprintf(tw, "%s\t%d/%d\t%d\t%d\t%d\t%v\t%v\t%v\t%s\t\n", r.name, len(r.ttft), o.numPrompts, r.badKV, r.reasoned, r.toolUse,
			meanDur(r.ttft).Round(10*time.Microsecond), pctDur(r.ttft, 50).Round(10*time.Microsecond), pctDur(r.ttft, 99).Round(10*time.Microsecond), hops)
	}
	tw.Flush()
	if len(runs) == 2 && len(runs[0].ttft) > 0 && len(runs[1].ttft) > 0 {
		fmt.Fprintf(stdout, "\nTTFT with the render tier minus without: mean %v, p50 %v\n",
			(meanDur(runs[1].ttft) - meanDur(runs[0].ttft)).Round(10*time.Microsecond), (pctDur(runs[1].ttft, 50) - pctDur(runs[0].ttft, 50)).Round(10*time.Microsecond))
	}
	for _, r := range runs {
		if r.failed > 0 {
			return fmt.Errorf("%s: %d of %d requests failed; the first: %v", r.name, r.failed, o.numPrompts, r.firstErr)
		}
		if r.badKV > 0 {
			return fmt.Errorf("%s: %d KV mismatches on decode", r.name, r.badKV)
		}
	}
	return nil
}

func meanDur(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	var s time.Duration
	for _, d := range ds {
		s += d
	}
	return s / time.Duration(len(ds))
}

// pctDur is the p-th percentile (nearest rank) of ds.
func pctDur(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	k := int(p/100*float64(len(s))+0.999999) - 1
	return s[max(0, min(k, len(s)-1))]
}
