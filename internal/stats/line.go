package stats

import (
	"math"
	"slices"
	"strconv"
	"strings"

	"go.uber.org/zap"
)

// lineItem is one key=value of the metrics line, and the same figure as a
// zap field of the same key.
type lineItem struct {
	key, text string
	field     zap.Field
}

// intervalReport is one logging interval: the transfers it saw and how far
// each counter moved in it.
type intervalReport struct {
	xfers intervalTransfersTaken
	// moved is every counter's increase over the interval, shared counters
	// first, then the extra ones, as Snapshot orders them.
	moved []CounterValue
	// prefixHits is each KV-cache group's increase (nil without groups).
	prefixHits []uint64
}

// countersOf lists a snapshot's counters, shared ones under their Set
// names, then the extra ones.
func countersOf(s Snapshot) []CounterValue {
	shared := []CounterValue{
		{Name: "failed_transfers", Value: s.FailedTransfers},
		{Name: "failed_notifications", Value: s.FailedNotifications},
		{Name: "failed_handshakes", Value: s.FailedHandshakes},
		{Name: "expired_requests", Value: s.ExpiredRequests},
		{Name: "unknown_notifications", Value: s.UnknownNotifications},
		{Name: "late_notifications", Value: s.LateNotifications},
		{Name: "malformed_notifications", Value: s.MalformedNotifications},
		{Name: "malformed_frames", Value: s.MalformedFrames},
	}
	return append(shared, s.Extra...)
}

// movedBetween returns each counter's increase from prev to now; counters
// are monotonic and only ever appended, so a counter prev lacks started at 0.
func movedBetween(now, prev Snapshot) (moved []CounterValue, prefixHits []uint64, anyMoved bool) {
	was := countersOf(prev)
	for i, c := range countersOf(now) {
		if i < len(was) {
			c.Value -= was[i].Value
		}
		moved = append(moved, c)
		anyMoved = anyMoved || c.Value > 0
	}
	for i, g := range now.PrefixHitBlocks {
		v := g.Value
		if i < len(prev.PrefixHitBlocks) {
			v -= prev.PrefixHitBlocks[i].Value
		}
		prefixHits = append(prefixHits, v)
		anyMoved = anyMoved || v > 0
	}
	return moved, prefixHits, anyMoved
}

func (r intervalReport) count(name string) uint64 {
	for _, c := range r.moved {
		if c.Name == name {
			return c.Value
		}
	}
	return 0
}

// failedTransferCounters are the counters vLLM's "Num failed transfers"
// adds up (nixl/stats.py reduce, vllm 0.34.0); gonixl's line shows each of
// them too. vllmOnlyCounters are the counters the line shows under vLLM's
// key only, being the same quantity.
var (
	failedTransferCounters = []string{"failed_transfers", "failed_handshakes", "failed_notifications"}
	vllmOnlyCounters       = []string{"expired_requests", "late_notifications"}
)

// items returns the line's key=value items: vLLM's keys in vLLM's order
// (the dict nixl/stats.py NixlKVConnectorStats.reduce returns, vllm
// 0.34.0), then every gonixl counter that moved, as "gonixl.<name>".
func (r intervalReport) items() []lineItem {
	var out []lineItem
	count := func(key string, v uint64) {
		out = append(out, lineItem{key: key, text: strconv.FormatUint(v, 10), field: zap.Uint64(key, v)})
	}
	figure := func(key string, v float64, places int) {
		if r.xfers.transfers == 0 {
			// vLLM writes the integer 0 for every figure of an interval
			// without successful transfers.
			out = append(out, lineItem{key: key, text: "0", field: zap.Float64(key, 0)})
			return
		}
		text, rounded := pyRound(v, places)
		out = append(out, lineItem{key: key, text: text, field: zap.Float64(key, rounded)})
	}
	xfer, post := r.xfers.xfer, r.xfers.post
	totalMB := float64(r.xfers.bytes) / (1 << 20) // vLLM's "MB" is 2^20 bytes
	count("Num successful transfers", r.xfers.transfers)
	figure("Avg xfer time (ms)", meanMS(xfer), 3)
	figure("P90 xfer time (ms)", p90MS(xfer), 3)
	figure("Avg post time (ms)", meanMS(post), 3)
	figure("P90 post time (ms)", p90MS(post), 3)
	figure("Avg MB per transfer", safeDiv(totalMB, float64(r.xfers.transfers)), 3)
	figure("Throughput (MB/s)", safeDiv(totalMB, xfer.sum.Seconds()), 3)
	figure("Avg number of descriptors", safeDiv(float64(r.xfers.descriptors), float64(r.xfers.transfers)), 1)
	var failed uint64
	for _, n := range failedTransferCounters {
		failed += r.count(n)
	}
	count("Num failed transfers", failed)
	count("Num KV expired reqs", r.count("expired_requests"))
	count("Num notifs after expiry", r.count("late_notifications"))

	for _, c := range r.moved {
		if c.Value > 0 && !slices.Contains(vllmOnlyCounters, c.Name) {
			count("gonixl."+c.Name, c.Value)
		}
	}
	if slices.ContainsFunc(r.prefixHits, func(v uint64) bool { return v > 0 }) {
		parts := make([]string, len(r.prefixHits))
		for i, v := range r.prefixHits {
			parts[i] = strconv.FormatUint(v, 10)
		}
		key := "gonixl.prefix_hit_blocks"
		out = append(out, lineItem{key: key, text: strings.Join(parts, ","), field: zap.Uint64s(key, r.prefixHits)})
	}
	return out
}

// lineOf formats items as vLLM's line: "KV Transfer metrics: " and
// key=value joined by ", " (metrics.py KVConnectorLogging.log, vllm 0.34.0).
func lineOf(items []lineItem) string {
	parts := make([]string, len(items))
	for i, it := range items {
		parts[i] = it.key + "=" + it.text
	}
	return "KV Transfer metrics: " + strings.Join(parts, ", ")
}

// fieldsOf returns the items as zap fields, then tags.
func fieldsOf(items []lineItem, tags []zap.Field) []zap.Field {
	out := make([]zap.Field, 0, len(items)+len(tags))
	for _, it := range items {
		out = append(out, it.field)
	}
	return append(out, tags...)
}

func meanMS(s intervalSamples) float64 {
	if s.count == 0 {
		return 0
	}
	return s.sum.Seconds() * 1e3 / float64(s.count)
}

func p90MS(s intervalSamples) float64 {
	sec := make([]float64, len(s.kept))
	for i, d := range s.kept {
		sec[i] = d.Seconds()
	}
	slices.Sort(sec)
	return percentileLinear(sec, 90) * 1e3
}

// safeDiv is a/b, 0 where b is 0 (transfers timed at zero on an injected
// clock; numpy would give inf or nan).
func safeDiv(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// pyRound rounds v to places decimals and writes it as Python writes
// round(v, places): the shortest text that reads back as the rounded value,
// with at least one decimal ("4.0", "3.8", "476.837").
func pyRound(v float64, places int) (string, float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return strconv.FormatFloat(v, 'f', -1, 64), v
	}
	rounded, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'f', places, 64), 64)
	text := strconv.FormatFloat(rounded, 'f', -1, 64)
	if !strings.ContainsAny(text, ".") {
		text += ".0"
	}
	return text, rounded
}
