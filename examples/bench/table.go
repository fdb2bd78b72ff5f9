package main

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// printSummary writes a run's summary in the layout of vLLM's
// "Serving Benchmark Result" block.
func printSummary(w io.Writer, title string, cfg runConfig, s summary) {
	line := func(k string, v any) { fmt.Fprintf(w, "%-40s%-10v\n", k, v) }
	fmt.Fprintf(w, "%s\n", center(" "+title+" ", 50, '='))
	line("Successful requests:", s.Completed)
	line("Failed requests:", s.Failed)
	if cfg.MaxConcurrency > 0 {
		line("Maximum request concurrency:", cfg.MaxConcurrency)
	}
	line("Request rate configured (RPS):", fmt.Sprintf("%.2f", cfg.RequestRate))
	line("Benchmark duration (s):", fmt.Sprintf("%.2f", s.Duration.Seconds()))
	line("Total input tokens:", s.TotalInput)
	line("Total generated tokens:", s.TotalOutput)
	line("Request throughput (req/s):", fmt.Sprintf("%.2f", s.RequestThroughput))
	if !math.IsNaN(s.RequestGoodput) {
		line("Request goodput (req/s):", fmt.Sprintf("%.2f", s.RequestGoodput))
	}
	line("Output token throughput (tok/s):", fmt.Sprintf("%.2f", s.OutputThroughput))
	line("Total token throughput (tok/s):", fmt.Sprintf("%.2f", s.TotalTokenThroughput))
	for _, m := range []struct {
		title, name string
		d           distribution
	}{{"Time to First Token", "TTFT", s.TTFT}, {"Time per Output Token (excl. 1st token)", "TPOT", s.TPOT},
		{"Inter-token Latency", "ITL", s.ITL}, {"End-to-end Latency", "E2EL", s.E2EL}} {
		fmt.Fprintf(w, "%s\n", center(m.title, 50, '-'))
		line(fmt.Sprintf("Mean %s (ms):", m.name), fmt.Sprintf("%.2f", m.d.Mean))
		line(fmt.Sprintf("Median %s (ms):", m.name), fmt.Sprintf("%.2f", m.d.Median))
		for _, p := range s.PercentilesRequested {
			line(fmt.Sprintf("P%s %s (ms):", percentileKey(p)[1:], m.name), fmt.Sprintf("%.2f", m.d.Percentiles[percentileKey(p)]))
		}
	}
	fmt.Fprintln(w, strings.Repeat("=", 50))
}

func center(s string, width int, fill rune) string {
	if len(s) >= width {
		return s
	}
	left := (width - len(s)) / 2
	return strings.Repeat(string(fill), left) + s + strings.Repeat(string(fill), width-len(s)-left)
}
