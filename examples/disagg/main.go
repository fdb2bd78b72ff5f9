// Command disagg runs one prefill and one decode engine, two TP ranks each,
// in one process, and pushes the same batch of requests through the pull
// connector and through the push connector. For each mode it prints the
// requests done, the bytes moved and verified on decode, and the p50/p99
// critical path: from RequestFinished on prefill to the result on decode.
//
// By default the agents are loopback agents on a modeled link; built with
// -tags nixl they are NIXL agents with the UCX backend.
//
//	go run ./examples/disagg
//	go run ./examples/disagg -requests 500 -rate 2000 -link instant
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/gonixl/gonixl/examples/critbench"
	"github.com/gonixl/gonixl/nixl/loopback"
)

func main() {
	requests := flag.Int("requests", 200, "requests per mode")
	rate := flag.Float64("rate", 1000, "arrival rate, requests per second (0: all at once)")
	prefill := flag.Duration("prefill-time", 2*time.Millisecond, "simulated prefill compute per request (push registers before it)")
	handoff := flag.Duration("handoff", time.Millisecond, "pull only: prefill's answer to decode's Load (proxy round trip + decode scheduling)")
	link := flag.String("link", "modeled", `loopback link: "instant" or "modeled" (2 GB/s per link + 50us)`)
	inline := flag.Bool("inline", false, "also run pull with READs posted on the engine loop (vLLM today)")
	flag.Parse()
	if err := run(*requests, *rate, *prefill, *handoff, *link, *inline); err != nil {
		fmt.Fprintln(os.Stderr, "disagg:", err)
		os.Exit(1)
	}
}

func run(requests int, rate float64, prefill, handoff time.Duration, link string, inline bool) error {
	var model loopback.TransferModel
	switch link {
	case "instant":
	case "modeled":
		model = loopback.Bandwidth(2e9, 50*time.Microsecond)
	default:
		return fmt.Errorf(`-link is %q, want "instant" or "modeled"`, link)
	}
	newAgent, agents := agentFactory()
	if newAgent == nil {
		agents += " (" + model.String() + ")"
	}
	fmt.Printf("1 prefill + 1 decode engine, TP 2 each; agents: %s; %d requests at %g/s, %v of prefill each, pull handoff %v\n\n",
		agents, requests, rate, prefill, handoff)
	modes := []critbench.Mode{critbench.Pull, critbench.Push}
	if inline {
		modes = []critbench.Mode{critbench.Pull, critbench.PullInline, critbench.Push}
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\tdone\tbytes moved\tbytes verified\tcritical p50\tcritical p99\t")
	p50 := map[critbench.Mode]time.Duration{}
	for _, m := range modes {
		rep, err := critbench.Run(context.Background(), critbench.Config{
			Mode: m, PrefillTP: 2, DecodeTP: 2, Requests: requests, Rate: rate,
			PrefillTime: prefill, Handoff: handoff, Link: model, NewAgent: newAgent,
		})
		if err != nil {
			return fmt.Errorf("%s: %w", m, err)
		}
		if rep.Failed > 0 {
			return fmt.Errorf("%s: %d requests failed, first: %v", m, rep.Failed, rep.FirstError)
		}
		p50[m] = rep.Critical.P50
		fmt.Fprintf(tw, "%s\t%d/%d\t%d\t%d\t%v\t%v\t\n", m, rep.Done, requests, rep.BytesMoved, rep.BytesVerified,
			rep.Critical.P50.Round(time.Microsecond), rep.Critical.P99.Round(time.Microsecond))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if p50[critbench.Pull] > 0 {
		fmt.Printf("\npush/pull critical-path p50: %.2f\n", float64(p50[critbench.Push])/float64(p50[critbench.Pull]))
	}
	return nil
}
