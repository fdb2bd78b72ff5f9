package latency

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func TestPercentileNearestRank(t *testing.T) {
	s := []time.Duration{}
	for i := 1; i <= 100; i++ {
		s = append(s, ms(i))
	}
	assert.Equal(t, ms(50), Percentile(s, 50))
	assert.Equal(t, ms(90), Percentile(s, 90))
	assert.Equal(t, ms(99), Percentile(s, 99))
	assert.Equal(t, ms(100), Percentile(s, 100))
	assert.Equal(t, ms(1), Percentile(s, 0.1))
	assert.Equal(t, time.Duration(0), Percentile(nil, 50))
	assert.Equal(t, ms(7), Percentile([]time.Duration{ms(7)}, 99))
}

func TestSummarize(t *testing.T) {
	got := Summarize([]time.Duration{ms(4), ms(1), ms(3), ms(2)})
	assert.Equal(t, Summary{Count: 4, Mean: 2500 * time.Microsecond, P50: ms(2), P90: ms(4), P99: ms(4), Max: ms(4)}, got)
	assert.Equal(t, Summary{}, Summarize(nil))
}

func TestRecorder(t *testing.T) {
	var r Recorder
	for i := 10; i >= 1; i-- {
		r.Add(ms(i))
	}
	s := r.Summary()
	assert.Equal(t, 10, s.Count)
	assert.Equal(t, ms(5), s.P50)
	assert.Equal(t, ms(10), s.Max)
	r.Reset()
	assert.Equal(t, 0, r.Summary().Count)
}

func TestWindowKeepsRecentForPercentilesAllForMean(t *testing.T) {
	w := NewWindow(3)
	assert.Equal(t, Stats{}, w.Stats())
	for _, d := range []int{100, 100, 1, 2, 3} {
		w.Add(ms(d))
	}
	st := w.Stats()
	assert.Equal(t, uint64(5), st.Count)
	assert.Equal(t, ms(206), st.Sum)
	assert.Equal(t, ms(206)/5, st.Mean)
	assert.Equal(t, ms(2), st.P50, "only 1,2,3 remain in the window")
	assert.Equal(t, ms(3), st.P90)
}
