package pushconn

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gonixl/gonixl/promstats"
)

func TestMetricsLogLine(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	log := zap.New(core)
	r := newRig(t, rigConfig{rank: func(c *Config) { c.Logger = log; c.StatsInterval = 5 * time.Millisecond }})
	pushOne(t, r, true, "m-1", "m-1", blocksFrom(0, 2), blocksFrom(2, 2), 32)
	line := func(role, want string) bool {
		for _, e := range logs.All() {
			if strings.HasPrefix(e.Message, "KV Transfer metrics:") && e.ContextMap()["role"] == role && strings.Contains(e.Message, want) {
				return true
			}
		}
		return false
	}
	// Each line covers its interval, so the request's counts may spread over
	// several lines; a counter that did not move is not in any.
	eventually(t, "prefill metrics line", func() bool {
		return line("prefill", "KV Transfer metrics: Num successful transfers=1, ") &&
			line("prefill", " gonixl.registrations_received=1") && line("prefill", " gonixl.matched_exact=1")
	})
	eventually(t, "decode metrics line", func() bool { return line("decode", " gonixl.registrations_sent=1") })
	if line("prefill", "push_fail_sent") {
		t.Error("push_fail_sent did not move, yet a line shows it")
	}
}

func TestPromstatsExportsPushCounters(t *testing.T) {
	r := newRig(t, rigConfig{})
	pushOne(t, r, true, "p-1", "p-1", blocksFrom(0, 1), blocksFrom(1, 1), 16)
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(promstats.New(r.producers[0], promstats.Options{Namespace: "vllm"})); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			if c := m.GetCounter(); c != nil {
				got[f.GetName()] = c.GetValue()
			}
		}
	}
	for name, want := range map[string]float64{
		"vllm_nixl_registrations_received_total": 1,
		"vllm_nixl_matched_exact_total":          1,
		"vllm_nixl_push_fail_sent_total":         0,
		"vllm_nixl_num_failed_transfers_total":   0,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (exported %v), want %v", name, v, ok, want)
		}
	}
}
