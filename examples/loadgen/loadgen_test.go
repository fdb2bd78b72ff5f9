package loadgen

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOffsetsFixedRate(t *testing.T) {
	o, err := Arrivals{Rate: 4}.Offsets(3)
	require.NoError(t, err)
	assert.Equal(t, []time.Duration{0, 250 * time.Millisecond, 500 * time.Millisecond}, o)
}

func TestOffsetsBurst(t *testing.T) {
	o, err := Arrivals{}.Offsets(3)
	require.NoError(t, err)
	assert.Equal(t, []time.Duration{0, 0, 0}, o)
}

func TestOffsetsPoissonMeanAndRepeatable(t *testing.T) {
	a := Arrivals{Rate: 1000, Poisson: true, Seed: 7}
	o1, err := a.Offsets(20001)
	require.NoError(t, err)
	o2, _ := a.Offsets(20001)
	assert.Equal(t, o1, o2)
	mean := o1[len(o1)-1] / 20000
	assert.InDelta(t, float64(time.Millisecond), float64(mean), float64(50*time.Microsecond))
}

func TestOffsetsRejectNegativeRate(t *testing.T) {
	_, err := Arrivals{Rate: -1}.Offsets(1)
	assert.EqualError(t, err, "loadgen: rate must be >= 0, got -1")
}

func TestRunIssuesAllInOrder(t *testing.T) {
	var got []int
	require.NoError(t, Run(context.Background(), Arrivals{Rate: 10000}, 5, func(i int) { got = append(got, i) }))
	assert.Equal(t, []int{0, 1, 2, 3, 4}, got)
}

func TestRunStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	err := Run(ctx, Arrivals{Rate: 1}, 100, func(i int) {
		n++
		cancel()
	})
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, 1, n)
}
