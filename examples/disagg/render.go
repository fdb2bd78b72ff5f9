package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/gonixl/gonixl/examples/completions"
	"github.com/gonixl/gonixl/examples/engine/server"
	"github.com/gonixl/gonixl/examples/render/chat"
)

// -render runs chat completions through the render tier (docs/serving.md,
// "The render tier"): per mode, a stack whose engines run tokens-only
// behind a render server (render, P/D on token ids, derender), and, for
// comparison, a stack whose engines run the same chat pipeline in process.
// The engines answer from a reply script (server.DemoReplyTexts, tokenized
// by the pipeline) that the KV they computed or loaded picks, so the
// answers carry reasoning and tool calls; both stacks must answer every
// request alike, and decode must verify every KV byte.

const weatherTool = `[{"type":"function","function":{"name":"get_weather","description":"The weather of a city","parameters":{"type":"object","properties":{"city":{"type":"string"},"unit":{"type":"string"}},"required":["city"]}}}]`

// renderChatBody is chat request i of the -render run: its own question,
// tools on every other request.
func renderChatBody(model string, i, promptWords, maxTokens int) []byte {
	q := promptText(7, i, promptWords)
	m := map[string]any{"model": model, "max_tokens": maxTokens, "stream": true, "stream_options": map[string]any{"include_usage": true},
		"messages": []map[string]any{{"role": "system", "content": "You are brief."}, {"role": "user", "content": "What is the weather in Paris? " + q}}}
	if i%2 == 1 {
		m["tools"] = json.RawMessage(weatherTool)
	}
	b, _ := json.Marshal(m)
	return b
}

type renderRow struct {
	mode, tier string
	done       int
	verified   uint64
	bad        uint64
	ttft       []time.Duration
	replies    []completions.Reply
	reasoned   int // replies with reasoning and content
	toolCalls  int // replies with a tool call
	firstErr   error
}

// runRender is -render's run.
func runRender(ctx context.Context, o options) error {
	pipe, err := chat.New(chat.Config{}) // the render server's: the default pipeline
	if err != nil {
		return err
	}
	replies := server.ReplyScript(pipe, server.DemoReplyTexts)
	var rows []renderRow
	var errs []error
	for _, mode := range o.modes {
		var both [2]renderRow
		for k, tier := range []bool{false, true} {
			cfg, err := o.stackConfig(mode)
			if err != nil {
				return err
			}
			cfg.Chat, cfg.Render, cfg.Replies = pipe, tier, replies
			s, err := startStack(cfg)
			if err != nil {
				return fmt.Errorf("%s: %w", mode, err)
			}
			r := renderRow{mode: mode, tier: map[bool]string{false: "in process", true: "render tier"}[tier]}
			client := &http.Client{Timeout: 2 * time.Minute}
			if smp, _ := completions.StreamReply(ctx, client, s.url(), "warm", renderChatBody(o.served, 999, 8, 4)); smp.Err != nil {
				r.firstErr = fmt.Errorf("warm-up: %w", smp.Err)
			}
			before := s.Decode.Stats()
			samples := make([]completions.Sample, o.requests)
			r.replies = make([]completions.Reply, o.requests)
			var wg sync.WaitGroup
			for i := range o.requests {
				wg.Go(func() {
					samples[i], r.replies[i] = completions.StreamReply(ctx, client, s.url(), fmt.Sprintf("render-%d", i), renderChatBody(o.served, i, o.promptWords, o.maxTokens))
				})
			}
			wg.Wait()
			for i, smp := range samples {
				if smp.Err != nil {
					if r.firstErr == nil {
						r.firstErr = fmt.Errorf("request %d: %w", i, smp.Err)
					}
					continue
				}
				r.done++
				r.ttft = append(r.ttft, smp.TTFT)
				rp := r.replies[i]
				if len(rp.ToolCalls) > 0 {
					r.toolCalls++
				} else if strings.TrimSpace(rp.Reasoning) != "" && rp.Content != "" {
					r.reasoned++
				}
			}
			after := s.Decode.Stats()
			r.verified, r.bad = after.KVBytesVerified-before.KVBytesVerified, after.KVVerifyFailures-before.KVVerifyFailures
			if err := s.close(); err != nil {
				return fmt.Errorf("%s: close: %w", mode, err)
			}
			both[k] = r
			rows = append(rows, r)
			if r.firstErr != nil {
				errs = append(errs, fmt.Errorf("%s, %s: %w", mode, r.tier, r.firstErr))
			}
			if r.bad > 0 {
				errs = append(errs, fmt.Errorf("%s, %s: %d KV mismatches on decode", mode, r.tier, r.bad))
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
		for i := range o.requests {
			if !reflect.DeepEqual(both[0].replies[i], both[1].replies[i]) {
				errs = append(errs, fmt.Errorf("%s: request %d answered differently: in process %+v, render tier %+v", mode, i, both[0].replies[i], both[1].replies[i]))
				break
			}
		}
	}
	fmt.Fprintf(o.out, "chat completions: proxy -> render server (render, derender) + 1 prefill + 1 decode engine (TP 2, model %s, tokens-only); %d streaming requests per mode, max_tokens %d\n",
		o.model, o.requests, o.maxTokens)
	fmt.Fprintln(o.out, "compared with engines that run the same chat pipeline in process (no render tier):")
	fmt.Fprintln(o.out)
	tw := tabwriter.NewWriter(o.out, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\tchat\tdone\tKV bytes verified\tKV mismatches\treasoned answers\ttool calls\tTTFT p50\tTTFT p99\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%d\t%d\t%d\t%d\t%v\t%v\t\n", r.mode, r.tier, r.done, o.requests, r.verified, r.bad, r.reasoned, r.toolCalls,
			ms(percentile(r.ttft, 50)), ms(percentile(r.ttft, 99)))
	}
	tw.Flush()
	if len(rows) > 0 {
		fmt.Fprintln(o.out, "\nWhat the render tier served (first requests of the last mode):")
		last := rows[len(rows)-1]
		for i, rp := range last.replies[:min(3, len(last.replies))] {
			fmt.Fprintf(o.out, "  request %d: finish_reason %q\n", i, rp.FinishReason)
			if strings.TrimSpace(rp.Reasoning) != "" {
				fmt.Fprintf(o.out, "    reasoning: %q\n", strings.TrimSpace(rp.Reasoning))
			}
			if strings.TrimSpace(rp.Content) != "" {
				fmt.Fprintf(o.out, "    content:   %q\n", strings.TrimSpace(rp.Content))
			}
			for _, tc := range rp.ToolCalls {
				fmt.Fprintf(o.out, "    tool call: %s(%s)\n", tc.Name, tc.Arguments)
			}
		}
	}
	if len(errs) == 0 {
		fmt.Fprintln(o.out, "\nEvery request answered alike with and without the render tier; decode verified the KV of each.")
	}
	return errors.Join(errs...)
}
