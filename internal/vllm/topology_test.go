package vllm

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTargetRanks(t *testing.T) {
	for _, tc := range []struct {
		localTP, rank, remoteTP int
		want                    []int
	}{
		{1, 0, 1, []int{0}},
		{2, 1, 1, []int{0}},
		{4, 3, 2, []int{1}},
		{4, 1, 2, []int{0}},
		{1, 0, 2, []int{0, 1}},
		{2, 1, 4, []int{2, 3}},
	} {
		got, err := TargetRanks(tc.localTP, tc.rank, tc.remoteTP)
		require.NoError(t, err)
		assert.Equal(t, tc.want, got, "%+v", tc)
	}
	_, err := TargetRanks(3, 0, 2)
	assert.EqualError(t, err, "vllm: TP sizes 3 and 2 do not divide each other")
	_, err = TargetRanks(2, 2, 1)
	assert.EqualError(t, err, "vllm: rank 2 outside TP size 2")
}

// The counts of version 12: TP 2 -> 2 sends ":1" (version 7 sent ":2").
func TestCompletionCounts(t *testing.T) {
	assert.Equal(t, 1, CompletionCount(2, 2))
	assert.Equal(t, 2, CompletionCount(4, 2))
	assert.Equal(t, 1, CompletionCount(1, 4))
	assert.Equal(t, 1, PushCompletions(1, 2, 2))
	assert.Equal(t, 2, PushCompletions(1, 4, 2))
	assert.Equal(t, 4, PushCompletions(2, 4, 2))
	assert.Equal(t, 1, PushCompletions(1, 1, 4))
}
