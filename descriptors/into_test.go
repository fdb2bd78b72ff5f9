package descriptors

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMapCoalescedIntoReuses(t *testing.T) {
	src, dst := qwen(16, 0, 1, 1<<40), qwen(16, 0, 1, 1<<41)
	fragmented := Request{SrcBlocks: ids(64, 0, 2), DstBlocks: ids(64, 1, 2)}
	contiguous := Request{SrcBlocks: ids(64, 0, 1), DstBlocks: ids(64, 100, 1)}

	var buf Transfer
	st, err := MapCoalescedInto(&buf, src, dst, fragmented)
	require.NoError(t, err)
	assert.Equal(t, Stats{Before: 64 * 128, After: 64 * 128}, st)
	want, _, err := MapCoalesced(src, dst, fragmented)
	require.NoError(t, err)
	assert.Equal(t, want, buf)
	first := &buf.Src.Descs[0]

	st, err = MapCoalescedInto(&buf, src, dst, contiguous)
	require.NoError(t, err)
	assert.Equal(t, Stats{Before: 64 * 128, After: 128}, st)
	want, _, _ = MapCoalesced(src, dst, contiguous)
	assert.Equal(t, want.Src.Descs, buf.Src.Descs)
	assert.Equal(t, want.Dst.Descs, buf.Dst.Descs)
	assert.Same(t, first, &buf.Src.Descs[0], "capacity not reused")

	allocs := testing.AllocsPerRun(20, func() {
		if _, err := MapCoalescedInto(&buf, src, dst, fragmented); err != nil {
			t.Fatal(err)
		}
	})
	assert.Equal(t, 0.0, allocs)

	// Coalescing the result again changes nothing.
	again, st := Coalesce(buf)
	assert.Equal(t, Stats{Before: 64 * 128, After: 64 * 128}, st)
	assert.Equal(t, buf, again)
}

func TestMapCoalescedIntoErrors(t *testing.T) {
	src, dst := qwen(16, 0, 1, 1<<40), qwen(16, 0, 1, 1<<41)
	_, err := MapCoalescedInto(nil, src, dst, Request{})
	assert.ErrorIs(t, err, ErrInvalid)
	assert.Equal(t, "descriptors: MapCoalescedInto: buf is nil", err.Error())

	var buf Transfer
	_, err = MapCoalescedInto(&buf, src, dst, Request{SrcBlocks: []int{0}, DstBlocks: []int{1}})
	require.NoError(t, err)
	before := buf
	saved := append([]any(nil), buf.Src.Descs[0], buf.Dst.Descs[0])
	_, err = MapCoalescedInto(&buf, src, dst, Request{SrcBlocks: []int{0}, DstBlocks: []int{4096}})
	assert.Equal(t, "descriptors: destination block id 4096 at index 0 out of range [0, 4096)", err.Error())
	assert.Equal(t, before, buf)
	assert.Equal(t, saved, []any{buf.Src.Descs[0], buf.Dst.Descs[0]})
}
