package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// transferStats are an engine's NIXL transfer metrics, read from its
// Prometheus endpoint: vLLM's names (vllm:nixl_xfer_time_seconds, ...) or
// gonixl's (gonixl_nixl_...), summed over every rank's series.
type transferStats struct {
	Transfers      uint64  // transfers timed
	XferSeconds    float64 // their total time
	Descriptors    float64 // their descriptors in all
	Bytes          float64 // their bytes in all
	FailedXfers    float64
	HaveHistograms bool // the endpoint exports transfer histograms at all
	// The simulated engine's own checks (examples/engine): KV bytes decode
	// verified, and requests whose KV differed.
	KVVerified, KVVerifyFailures float64
	// A push prefill engine's progress reports to its ranks, taken and
	// refused (gonixl_engine_progress_reports_total).
	ProgressTaken, ProgressRefused float64
}

// maxMetricsBytes bounds what is read from a /metrics endpoint.
const maxMetricsBytes = 8 << 20

// scrapeTransfers reads url (an engine's base URL) + /metrics.
func scrapeTransfers(ctx context.Context, baseURL string) (transferStats, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(baseURL, "/")+"/metrics", nil)
	if err != nil {
		return transferStats{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return transferStats{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return transferStats{}, fmt.Errorf("GET %s/metrics: HTTP %d", baseURL, resp.StatusCode)
	}
	return parseTransfers(io.LimitReader(resp.Body, maxMetricsBytes))
}

// parseTransfers reads Prometheus text exposition.
func parseTransfers(r io.Reader) (transferStats, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return transferStats{}, fmt.Errorf("metrics: %w", err)
	}
	var st transferStats
	for name, f := range fams {
		base := name
		if i := strings.LastIndexAny(base, ":"); i >= 0 {
			base = base[i+1:]
		}
		base = strings.TrimPrefix(base, "gonixl_")
		switch base {
		case "nixl_xfer_time_seconds":
			st.HaveHistograms = true
			for _, m := range f.GetMetric() {
				st.Transfers += m.GetHistogram().GetSampleCount()
				st.XferSeconds += m.GetHistogram().GetSampleSum()
			}
		case "nixl_num_descriptors":
			st.Descriptors += histogramSum(f)
		case "nixl_bytes_transferred":
			st.Bytes += histogramSum(f)
		case "engine_kv_bytes_verified_total", "engine_kv_bytes_verified":
			st.KVVerified += counterSum(f)
		case "engine_kv_verify_failures_total", "engine_kv_verify_failures":
			st.KVVerifyFailures += counterSum(f)
		case "nixl_num_failed_transfers_total", "nixl_num_failed_transfers":
			st.FailedXfers += counterSum(f)
		case "engine_progress_reports_total", "engine_progress_reports":
			for _, m := range f.GetMetric() {
				v := m.GetCounter().GetValue() + m.GetUntyped().GetValue()
				for _, l := range m.GetLabel() {
					switch {
					case l.GetName() != "result":
					case l.GetValue() == "taken":
						st.ProgressTaken += v
					case l.GetValue() == "refused":
						st.ProgressRefused += v
					}
				}
			}
		}
	}
	return st, nil
}

func counterSum(f *dto.MetricFamily) float64 {
	var s float64
	for _, m := range f.GetMetric() {
		s += m.GetCounter().GetValue() + m.GetUntyped().GetValue()
	}
	return s
}

func histogramSum(f *dto.MetricFamily) float64 {
	var s float64
	for _, m := range f.GetMetric() {
		s += m.GetHistogram().GetSampleSum()
	}
	return s
}

// sub is what happened between two scrapes.
func (a transferStats) sub(b transferStats) transferStats {
	return transferStats{Transfers: a.Transfers - b.Transfers, XferSeconds: a.XferSeconds - b.XferSeconds,
		Descriptors: a.Descriptors - b.Descriptors, Bytes: a.Bytes - b.Bytes, FailedXfers: a.FailedXfers - b.FailedXfers,
		HaveHistograms: a.HaveHistograms, KVVerified: a.KVVerified - b.KVVerified, KVVerifyFailures: a.KVVerifyFailures - b.KVVerifyFailures,
		ProgressTaken: a.ProgressTaken - b.ProgressTaken, ProgressRefused: a.ProgressRefused - b.ProgressRefused}
}

// add sums two engines' figures.
func (a transferStats) add(b transferStats) transferStats {
	return transferStats{Transfers: a.Transfers + b.Transfers, XferSeconds: a.XferSeconds + b.XferSeconds,
		Descriptors: a.Descriptors + b.Descriptors, Bytes: a.Bytes + b.Bytes, FailedXfers: a.FailedXfers + b.FailedXfers,
		HaveHistograms: a.HaveHistograms || b.HaveHistograms, KVVerified: a.KVVerified + b.KVVerified,
		KVVerifyFailures: a.KVVerifyFailures + b.KVVerifyFailures,
		ProgressTaken:    a.ProgressTaken + b.ProgressTaken, ProgressRefused: a.ProgressRefused + b.ProgressRefused}
}

// mean is the mean transfer time, descriptors and bytes per transfer.
func (a transferStats) mean() (time.Duration, float64, float64) {
	if a.Transfers == 0 {
		return 0, 0, 0
	}
	n := float64(a.Transfers)
	return time.Duration(a.XferSeconds / n * float64(time.Second)), a.Descriptors / n, a.Bytes / n
}
