package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/gonixl/gonixl/examples/completions"
)

// turnSample is one turn of one conversation as the client saw it.
type turnSample struct {
	turn int
	completions.Sample
}

// conversations runs n chat conversations of turns turns each through the
// proxy at url, started at Poisson arrivals at rate per second; each turn
// sends the messages so far, the reply as it came back and a new user
// message of words words, as a chat client does.
func conversations(ctx context.Context, url, model string, n, turns int, rate float64, words, maxTokens int, seed uint64) [][]turnSample {
	rng := rand.New(rand.NewPCG(seed, 2))
	out := make([][]turnSample, n)
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 2 * time.Minute}
	for i := range n {
		if rate > 0 && i > 0 {
			select {
			case <-time.After(time.Duration(rng.ExpFloat64() / rate * float64(time.Second))):
			case <-ctx.Done():
			}
		}
		wg.Go(func() {
			var msgs []completions.Message
			prompt := 0
			for t := range turns {
				msg := promptText(seed, i*1000+t, words)
				msgs = append(msgs, completions.Message{Role: "user", Content: msg})
				prompt += words + 4 // the template's role markers
				s := completions.StreamChat(ctx, client, url, model, fmt.Sprintf("conv-%d-%d-t%d", seed, i, t+1), msgs, prompt, maxTokens)
				out[i] = append(out[i], turnSample{turn: t + 1, Sample: s})
				if s.Err != nil {
					return // the conversation cannot go on without the reply
				}
				msgs = append(msgs, completions.Message{Role: "assistant", Content: s.Text})
				prompt += s.OutputTokens
			}
		})
	}
	wg.Wait()
	return out
}

// runTurns is the -turns job: multi-turn chats through a pull stack with
// bidirectional KV, and the same without it (prefill recomputes every
// turn's history), with 0 KV mismatches required of both.
func runTurns(ctx context.Context, o options) error {
	type row struct {
		name             string
		done, sent       int
		perTurn          map[int][]time.Duration
		read, recomputed uint64
		verified, bad    uint64
		firstErr         error
	}
	var rows []row
	kind := ""
	for _, bidir := range []bool{true, false} {
		cfg, err := o.stackConfig("pull")
		if err != nil {
			return err
		}
		cfg.Bidirectional = bidir
		name := "pull, bidirectional"
		if !bidir {
			name = "pull, history recomputed"
		}
		s, err := startStack(cfg)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		kind = s.agentKind
		warm := load(ctx, s.url(), o.served, 1, 0, 8, 2, 99)
		r := row{name: name, perTurn: map[int][]time.Duration{}}
		if warm[0].err != nil {
			r.firstErr = fmt.Errorf("warm-up: %w", warm[0].err)
		}
		// And one two-turn conversation: the handshakes of the D->P
		// direction are not what the table measures either.
		for _, ts := range conversations(ctx, s.url(), o.served, 1, 2, 0, 100, 2, 98)[0] {
			if ts.Err != nil && r.firstErr == nil {
				r.firstErr = fmt.Errorf("warm-up conversation: %w", ts.Err)
			}
		}
		p0, d0 := s.Prefill.Stats(), s.Decode.Stats()
		for _, conv := range conversations(ctx, s.url(), o.served, o.requests, o.turns, o.rate, o.promptWords, o.maxTokens, 1) {
			for _, ts := range conv {
				r.sent++
				if ts.Err != nil {
					if r.firstErr == nil {
						r.firstErr = fmt.Errorf("turn %d: %w", ts.turn, ts.Err)
					}
					continue
				}
				r.done++
				r.perTurn[ts.turn] = append(r.perTurn[ts.turn], ts.TTFT)
			}
		}
		p1, d1 := s.Prefill.Stats(), s.Decode.Stats()
		r.read, r.recomputed = p1.HistoryTokensRead-p0.HistoryTokensRead, p1.HistoryTokensRecomputed-p0.HistoryTokensRecomputed
		r.verified = p1.KVBytesVerified - p0.KVBytesVerified + d1.KVBytesVerified - d0.KVBytesVerified
		r.bad = p1.KVVerifyFailures - p0.KVVerifyFailures + d1.KVVerifyFailures - d0.KVVerifyFailures
		rows = append(rows, r)
		if err := s.close(); err != nil {
			return fmt.Errorf("%s: close: %w", name, err)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	fmt.Fprintf(o.out, "proxy -> 1 prefill + 1 decode engine (TP 2 each, model %s), agents: %s; %d chat conversations of %d turns at %g/s, %d new words a turn, %d output tokens\n\n",
		cmp.Or(o.model, demoModel.Name), kind, o.requests, o.turns, o.rate, o.promptWords, o.maxTokens)
	tw := tabwriter.NewWriter(o.out, 2, 4, 2, ' ', tabwriter.AlignRight)
	head := "mode\tturns done\tKV bytes verified\tKV mismatches\thistory tokens read back\trecomputed\t"
	for t := 1; t <= o.turns; t++ {
		head += fmt.Sprintf("TTFT p50 turn %d\t", t)
	}
	fmt.Fprintln(tw, head)
	var errs []error
	for _, r := range rows {
		line := fmt.Sprintf("%s\t%d/%d\t%d\t%d\t%d\t%d\t", r.name, r.done, o.requests*o.turns, r.verified, r.bad, r.read, r.recomputed)
		for t := 1; t <= o.turns; t++ {
			line += ms(percentile(r.perTurn[t], 50)) + "\t"
		}
		fmt.Fprintln(tw, line)
		if r.firstErr != nil {
			errs = append(errs, fmt.Errorf("%s: %w", r.name, r.firstErr))
		}
		if r.bad > 0 {
			errs = append(errs, fmt.Errorf("%s: %d KV mismatches", r.name, r.bad))
		}
	}
	tw.Flush()
	if len(rows) > 0 {
		fmt.Fprintf(o.out, "\nWith bidirectional KV, prefill read %d history tokens back from decode instead of recomputing them (%d recomputed: below the threshold or not held).\n",
			rows[0].read, rows[0].recomputed)
		if rows[0].read == 0 && o.turns > 1 {
			errs = append(errs, errors.New("bidirectional: no history token was read back"))
		}
	}
	fmt.Fprintln(o.out, "Three processes: add -bidirectional-kv-xfer to both engines and to the proxy:")
	for _, c := range threeCommands("pull", o.model, 1) {
		fmt.Fprintln(o.out, "  "+strings.Replace(c, " -port", " -bidirectional-kv-xfer -port", 1))
	}
	return errors.Join(errs...)
}
