// Command soak runs the reference serving stack (a prefill engine, a decode
// engine and the P/D proxy, for the pull and the push connector) for hours
// as users run it: a seeded schedule of bursts, steady traffic, slow
// readers, clients that leave mid-stream, idle gaps past every idle timeout
// of the stack, and kill -9 and restart of each engine and of the proxy at
// the same address. It checks every answer's text against the KV it must
// come from, free blocks at every idle point, the stack's counters against
// its own, and that memory, fds and goroutines stay flat; it writes a
// report (report.md, report.json) and plots into -out and exits 1 if a check
// failed. See README.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	code, err := runMain(ctx, os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
	}
	os.Exit(code)
}

func runMain(ctx context.Context, args []string) (int, error) {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	seed := fs.Int64("seed", 1, "seed of the schedule and of every call drawn")
	duration := fs.Duration("duration", time.Hour, "how long the schedule runs (planned; the last step ends it)")
	short := fs.Bool("short", false, "the CI preset: every kind of step once, one idle gap past every idle timeout (about 2 minutes)")
	mode := fs.String("mode", defaultMode, `"process" (engines and proxy as separate programs, NIXL over UCX: needs -tags nixl) or "inprocess" (one process, loopback agents, real HTTP)`)
	conns := fs.String("connectors", "pull,push,push-progressive", "stacks to soak, each its own, in lockstep: pull, push, push-progressive (push whose prefill reports progress per chunk and per layer)")
	out := fs.String("out", "soak-out", "directory of the report, the plots and the programs' logs")
	deadline := fs.Duration("deadline", clientWindow, "bound of every client request: one that passes it is UNANSWERED")
	if err := fs.Parse(args); err != nil {
		return 2, err
	}
	if *mode != modeProcess && *mode != modeInproc {
		return 2, fmt.Errorf("-mode %q: want %q or %q", *mode, modeProcess, modeInproc)
	}
	if *mode == modeProcess && !nixlBuild {
		return 2, fmt.Errorf("-mode process needs a soak built with -tags nixl (NIXL installed): loopback agents cannot cross processes")
	}
	var cs []string
	for _, c := range strings.Split(*conns, ",") {
		if err := checkStack(c); err != nil {
			return 2, err
		}
		cs = append(cs, c)
	}
	rep, err := run(ctx, Config{Seed: *seed, Duration: *duration, Short: *short, Mode: *mode, Connectors: cs, Out: *out,
		Progress: os.Stdout, Deadline: *deadline})
	if err != nil {
		return 1, err
	}
	fmt.Printf("\nreport: %s/report.md\n", *out)
	if rep.Failed() {
		fmt.Printf("FAIL: %d checks failed:\n  %s\n", len(rep.Failures), strings.Join(rep.Failures, "\n  "))
		return 1, nil
	}
	fmt.Println("PASS")
	return 0, nil
}
