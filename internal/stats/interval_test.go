package stats

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// numpy.percentile(v, 90) for these values (linear interpolation).
func TestPercentileLinear(t *testing.T) {
	assert.Equal(t, 0.0, percentileLinear(nil, 90))
	assert.Equal(t, 7.0, percentileLinear([]float64{7}, 90))
	assert.InDelta(t, 4.6, percentileLinear([]float64{1, 2, 3, 4, 5}, 90), 1e-12)
	assert.InDelta(t, 1.3, percentileLinear([]float64{1, 2, 3, 4}, 10), 1e-12)
	assert.Equal(t, 5.0, percentileLinear([]float64{1, 2, 3, 4, 5}, 100))
}

// An interval nobody logs keeps bounded memory: the last window samples
// for the percentile, exact count and sum for the mean.
func TestIntervalSamplesBounded(t *testing.T) {
	var r intervalSamples
	for i := 1; i <= window+10; i++ {
		r.add(time.Duration(i))
	}
	assert.Len(t, r.kept, window)
	assert.Equal(t, uint64(window+10), r.count)
	assert.Equal(t, time.Duration((window+10)*(window+11)/2), r.sum)
	assert.NotContains(t, r.kept, time.Duration(10), "the oldest samples went first")
	assert.Contains(t, r.kept, time.Duration(11))
}
