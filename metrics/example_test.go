package metrics_test

import (
	"fmt"
	"strings"
	"time"

	"github.com/gonixl/gonixl/metrics"
)

// A Snapshot reads like the counters vLLM logs; LogLine is the periodic
// "KV Transfer metrics:" line.
func ExampleSnapshot_LogLine() {
	s := metrics.Snapshot{Transfers: 2, Bytes: 4 << 20, Descriptors: 16,
		XferTime: metrics.Timing{Count: 2, Sum: 4 * time.Millisecond, Mean: 2 * time.Millisecond},
		Extra:    []metrics.Counter{{Name: "hold_queries", Value: 3}}}
	line := s.LogLine()
	fmt.Println(line[:strings.Index(line, " p90")])
	fmt.Println(strings.Contains(line, " throughput_mb_s=1048.6 "), strings.HasSuffix(line, " hold_queries=3"))
	v, ok := s.Get("hold_queries")
	fmt.Println(v, ok)
	// Output:
	// KV Transfer metrics: transfers=2 avg_xfer_ms=2.000
	// true true
	// 3 true
}
