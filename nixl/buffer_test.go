package nixl

import (
	"errors"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAllocBufferIsZeroedAlignedAndWritable(t *testing.T) {
	b, err := AllocBuffer(3 * 4096)
	require.NoError(t, err)
	defer b.Free()

	mem := b.Bytes()
	require.Len(t, mem, 3*4096)
	assert.Equal(t, 3*4096, b.Len())
	for i, v := range mem {
		if v != 0 {
			t.Fatalf("byte %d is %d, want 0", i, v)
		}
	}
	assert.NotZero(t, b.Addr())
	assert.Zero(t, b.Addr()%uint64(os.Getpagesize()), "address %#x not page aligned", b.Addr())

	mem[0], mem[len(mem)-1] = 0xAB, 0xCD
	again := b.Bytes()
	assert.Equal(t, byte(0xAB), again[0])
	assert.Equal(t, byte(0xCD), again[len(again)-1])
}

func TestAllocBufferRejectsNonPositiveSize(t *testing.T) {
	for _, n := range []int{0, -1} {
		b, err := AllocBuffer(n)
		assert.Nil(t, b)
		assert.ErrorContains(t, err, "size must be positive")
	}
}

func TestBufferDescriptors(t *testing.T) {
	b, err := AllocBuffer(8192)
	require.NoError(t, err)
	defer b.Free()

	assert.Equal(t, Desc{Addr: b.Addr() + 100, Len: 50}, b.Desc(100, 50))
	assert.Equal(t, uint64(b.Addr()+150), b.Desc(100, 50).End())
	assert.Equal(t, RegDesc{Desc: Desc{Addr: b.Addr(), Len: 8192}}, b.RegDesc())
}

func TestBufferFreeIsIdempotent(t *testing.T) {
	b, err := AllocBuffer(4096)
	require.NoError(t, err)
	addr := b.Addr()
	require.NoError(t, b.Free())
	require.NoError(t, b.Free())
	assert.Nil(t, b.Bytes())
	assert.Zero(t, b.Len())
	assert.Zero(t, b.Addr())
	_, err = HostBytes(addr, 1)
	assert.ErrorIs(t, err, ErrNotHostMemory)
}

func TestHostBytesBounds(t *testing.T) {
	b, err := AllocBuffer(4096)
	require.NoError(t, err)
	defer b.Free()
	a := b.Addr()
	b.Bytes()[10] = 7

	got, err := HostBytes(a+10, 5)
	require.NoError(t, err)
	assert.Equal(t, []byte{7, 0, 0, 0, 0}, got)
	assert.Equal(t, 5, cap(got), "capacity must stop at the range so appends cannot write past it")

	got[1] = 9
	assert.Equal(t, byte(9), b.Bytes()[11], "HostBytes aliases the buffer")

	whole, err := HostBytes(a, 4096)
	require.NoError(t, err)
	assert.Len(t, whole, 4096)

	empty, err := HostBytes(a+4096, 0)
	require.NoError(t, err)
	assert.Empty(t, empty)

	for name, r := range map[string][2]uint64{
		"past end":          {a + 4090, 7},
		"before start":      {a - 1, 2},
		"starts past end":   {a + 4097, 0},
		"huge length":       {a, ^uint64(0)},
		"address zero":      {0, 1},
		"wraps the address": {a + 10, ^uint64(0) - 5},
	} {
		_, err := HostBytes(r[0], r[1])
		assert.True(t, errors.Is(err, ErrNotHostMemory), name)
	}
}

func TestHostBytesFindsTheRightBuffer(t *testing.T) {
	var bufs []*Buffer
	for i := range 5 {
		b, err := AllocBuffer(4096 * (i + 1))
		require.NoError(t, err)
		b.Bytes()[0] = byte(i + 1)
		bufs = append(bufs, b)
	}
	defer func() {
		for _, b := range bufs {
			b.Free()
		}
	}()
	require.NoError(t, bufs[2].Free())
	for i, b := range bufs {
		if i == 2 {
			continue
		}
		got, err := HostBytes(b.Addr(), 1)
		require.NoError(t, err)
		assert.Equal(t, byte(i+1), got[0])
		_, err = HostBytes(b.Addr(), uint64(b.Len())+1)
		assert.ErrorIs(t, err, ErrNotHostMemory)
	}
}
