package stats

// percentileLinear returns the p-th percentile (0..100) of sorted values by
// linear interpolation between the two nearest ranks: numpy.percentile's
// default method, which vLLM's metrics line uses (nixl/stats.py, vllm
// 0.34.0). Past the midpoint it interpolates down from the upper value, as
// numpy does, so that the two agree to the last bit. It returns 0 for no
// values.
func percentileLinear(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := p / 100 * float64(len(sorted)-1)
	lo := int(rank)
	if lo >= len(sorted)-1 {
		return sorted[len(sorted)-1]
	}
	a, b, t := sorted[lo], sorted[lo+1], rank-float64(lo)
	if t >= 0.5 {
		return b - (b-a)*(1-t)
	}
	return a + (b-a)*t
}
