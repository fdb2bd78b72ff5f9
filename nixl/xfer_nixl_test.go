//go:build nixl

package nixl

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNativeWriteAndReadMoveTheBytes(t *testing.T) {
	const size = 1 << 20
	p := newPeers(t, size, Config{})

	// WRITE the first half of init's buffer into the second half of target's.
	half := uint64(size / 2)
	w, err := p.init.CreateXferReq(Write, dram(p.initBuf.Desc(0, half)), dram(p.tgtBuf.Desc(half, half)), p.target.Name(), nil)
	require.NoError(t, err)
	p.run(w, nil)
	requireBytes(t, pattern(size, 0x11)[:half], p.tgtBuf.Bytes()[half:], "WRITE destination")
	requireBytes(t, pattern(size, 0x55)[:half], p.tgtBuf.Bytes()[:half], "bytes outside the WRITE")
	require.NoError(t, p.init.ReleaseXferReq(w))

	// READ target's first half into init's second half.
	r, err := p.init.CreateXferReq(Read, dram(p.initBuf.Desc(half, half)), dram(p.tgtBuf.Desc(0, half)), p.target.Name(), nil)
	require.NoError(t, err)
	p.run(r, nil)
	requireBytes(t, pattern(size, 0x55)[:half], p.initBuf.Bytes()[half:], "READ destination")
	require.NoError(t, p.init.ReleaseXferReq(r))
}

func TestNativeManyDescriptorsAndRepost(t *testing.T) {
	const n, blk = 64, 4096
	p := newPeers(t, n*blk, Config{})
	var local, remote []Desc
	for i := range n {
		// Reverse the blocks so a wrong pairing shows in the bytes.
		local = append(local, p.initBuf.Desc(uint64(i*blk), blk))
		remote = append(remote, p.tgtBuf.Desc(uint64((n-1-i)*blk), blk))
	}
	req, err := p.init.CreateXferReq(Write, dram(local...), dram(remote...), p.target.Name(), nil)
	require.NoError(t, err)
	defer p.init.ReleaseXferReq(req)
	src := pattern(n*blk, 0x11)
	for round := range 3 {
		fill(p.tgtBuf.Bytes(), 0)
		p.run(req, nil)
		for i := range n {
			requireBytes(t, src[i*blk:(i+1)*blk], p.tgtBuf.Bytes()[(n-1-i)*blk:(n-i)*blk], "block")
		}
		_ = round
	}
}

func TestNativePreparedListsAndIndices(t *testing.T) {
	const blk = 1024
	p := newPeers(t, 8*blk, Config{})
	var local, remote []Desc
	for i := range 8 {
		local = append(local, p.initBuf.Desc(uint64(i*blk), blk))
		remote = append(remote, p.tgtBuf.Desc(uint64(i*blk), blk))
	}
	ld, err := p.init.PrepXferDlist("", dram(local...), nil)
	require.NoError(t, err)
	rd, err := p.init.PrepXferDlist(p.target.Name(), dram(remote...), nil)
	require.NoError(t, err)

	// Local blocks 0,1,2 -> remote 5,6,7 (mergeable run) and local 7 -> remote 0.
	for _, merge := range []bool{true, false} {
		fill(p.tgtBuf.Bytes(), 0)
		req, err := p.init.MakeXferReq(Write, ld, []int{0, 1, 2, 7}, rd, []int{5, 6, 7, 0}, &Options{SkipDescMerge: !merge})
		require.NoError(t, err)
		p.run(req, nil)
		src := pattern(8*blk, 0x11)
		dst := p.tgtBuf.Bytes()
		requireBytes(t, src[0:3*blk], dst[5*blk:8*blk], "blocks 0-2 -> 5-7")
		requireBytes(t, src[7*blk:8*blk], dst[0:blk], "block 7 -> 0")
		requireBytes(t, make([]byte, 4*blk), dst[blk:5*blk], "untouched blocks")
		require.NoError(t, p.init.ReleaseXferReq(req))
	}

	// Requests outlive the lists they were made from.
	req, err := p.init.MakeXferReq(Read, ld, []int{3}, rd, []int{3}, nil)
	require.NoError(t, err)
	require.NoError(t, p.init.ReleaseDlistHandle(ld))
	require.NoError(t, p.init.ReleaseDlistHandle(rd))
	p.run(req, nil)
	require.NoError(t, p.init.ReleaseXferReq(req))
}

func TestNativeTransferWithinOneAgent(t *testing.T) {
	a := newUCXAgent(t, testName(t), Config{})
	src := newBuffer(t, 8192, 0x21)
	dst := newBuffer(t, 8192, 0)
	require.NoError(t, a.RegisterMem(regDRAM(src), nil))
	require.NoError(t, a.RegisterMem(regDRAM(dst), nil))
	// Backends that support local transfers make the agent's own memory a
	// target under its own name at registration; no metadata is loaded.
	req, err := a.CreateXferReq(Write, dram(src.Desc(0, 8192)), dram(dst.Desc(0, 8192)), a.Name(), nil)
	require.NoError(t, err)
	_, err = a.PostXferReq(req, nil)
	require.NoError(t, err)
	eventually(t, "loopback WRITE", func() bool {
		s, err := a.XferStatus(req)
		require.NoError(t, err)
		return s == StatusSuccess
	}, a)
	requireBytes(t, pattern(8192, 0x21), dst.Bytes(), "loopback destination")
	require.NoError(t, a.ReleaseXferReq(req))
}

func TestNativeQueryBackendTelemetryAndCost(t *testing.T) {
	const size = 64 << 10
	p := newPeers(t, size, Config{CaptureTelemetry: true})
	req, err := p.init.CreateXferReq(Write, dram(p.initBuf.Desc(0, size/2), p.initBuf.Desc(size/2, size/2)),
		dram(p.tgtBuf.Desc(0, size/2), p.tgtBuf.Desc(size/2, size/2)), p.target.Name(), nil)
	require.NoError(t, err)
	defer p.init.ReleaseXferReq(req)

	backend, err := p.init.QueryXferBackend(req)
	require.NoError(t, err)
	assert.Equal(t, "UCX", backend)

	_, err = p.init.XferTelemetry(req)
	requireNIXLErr(t, err, ErrNotPosted, "telemetry before the transfer ran")

	p.run(req, nil)
	tel, err := p.init.XferTelemetry(req)
	require.NoError(t, err)
	assert.Equal(t, uint64(size), tel.TotalBytes)
	assert.Equal(t, uint64(2), tel.DescCount)
	assert.WithinDuration(t, time.Now(), tel.Start, waitLimit)
	assert.False(t, tel.Start.After(time.Now()))

	cost, err := p.init.EstimateXferCost(req, nil)
	if StatusOf(err) == StatusNotSupported {
		t.Logf("UCX gives no cost estimate: %v", err)
	} else {
		require.NoError(t, err)
		assert.Equal(t, CostAnalyticalBackend, cost.Method)
		assert.Positive(t, cost.Duration)
	}
}

func TestNativeTelemetryOff(t *testing.T) {
	p := newPeers(t, 4096, Config{})
	req, err := p.init.CreateXferReq(Write, dram(p.initBuf.Desc(0, 4096)), dram(p.tgtBuf.Desc(0, 4096)), p.target.Name(), nil)
	require.NoError(t, err)
	defer p.init.ReleaseXferReq(req)
	p.run(req, nil)
	_, err = p.init.XferTelemetry(req)
	require.ErrorIs(t, err, ErrNoTelemetry)
	assert.Contains(t, err.Error(), "CaptureTelemetry")
}

func TestNativeMakeConnectionAndBackendOption(t *testing.T) {
	p := newPeers(t, 4096, Config{})
	require.NoError(t, p.init.MakeConnection(p.target.Name(), nil))
	require.NoError(t, p.init.MakeConnection(p.target.Name(), &Options{Backends: []string{"UCX"}}))

	req, err := p.init.CreateXferReq(Write, dram(p.initBuf.Desc(0, 4096)), dram(p.tgtBuf.Desc(0, 4096)), p.target.Name(), &Options{Backends: []string{"UCX"}})
	require.NoError(t, err)
	p.run(req, nil)
	require.NoError(t, p.init.ReleaseXferReq(req))
	requireBytes(t, pattern(4096, 0x11), p.tgtBuf.Bytes(), "WRITE with explicit backend")

	_, err = p.init.CreateXferReq(Write, dram(p.initBuf.Desc(0, 4096)), dram(p.tgtBuf.Desc(0, 4096)), p.target.Name(), &Options{Backends: []string{"GDS"}})
	requireNIXLErr(t, err, ErrNotFound)
	assert.Contains(t, err.Error(), `backend "GDS" was not created`)
}

func TestNativePostXfer(t *testing.T) {
	p := newPeers(t, 8192, Config{})
	target := p.target.Name()
	h, s, err := p.init.PostXfer(Write, dram(p.initBuf.Desc(0, 8192)), dram(p.tgtBuf.Desc(0, 8192)), target, NotifOptions([]byte("posted")))
	require.NoError(t, err)
	require.NotZero(t, h)
	require.Contains(t, []Status{StatusSuccess, StatusInProgress}, s)
	s, err = p.wait(h)
	require.NoError(t, err)
	require.Equal(t, StatusSuccess, s)
	requireBytes(t, p.initBuf.Bytes(), p.tgtBuf.Bytes(), "destination")
	assert.Equal(t, [][]byte{[]byte("posted")}, p.waitNotifs(p.target, p.init.Name(), 1), "the creation-time notification")
	// The handle is an ordinary request: reposted, then released once.
	p.run(h, nil)
	assert.Len(t, p.waitNotifs(p.target, p.init.Name(), 2), 2)
	require.NoError(t, p.init.ReleaseXferReq(h))
	require.ErrorIs(t, p.init.ReleaseXferReq(h), ErrInvalidParam)

	// A refused creation is CreateXferReq's error, and leaves no handle.
	stray := newBuffer(t, 4096, 0)
	whole := dram(p.tgtBuf.Desc(0, 4096))
	live := p.init.xfers.len()
	for name, c := range map[string]struct {
		op            XferOp
		local, remote XferList
		to            string
	}{
		"unregistered":   {Write, dram(stray.Desc(0, 4096)), whole, target},
		"lengths differ": {Write, dram(p.initBuf.Desc(0, 4096)), dram(p.tgtBuf.Desc(0, 2048)), target},
		"unknown agent":  {Write, dram(p.initBuf.Desc(0, 4096)), whole, "nobody"},
		"unknown op":     {XferOp(7), dram(p.initBuf.Desc(0, 4096)), whole, target},
		"unknown memory": {Read, XferList{Mem: MemType(9), Descs: []Desc{p.initBuf.Desc(0, 4096)}}, whole, target},
	} {
		_, want := p.init.CreateXferReq(c.op, c.local, c.remote, c.to, nil)
		require.Error(t, want, name)
		h, _, err := p.init.PostXfer(c.op, c.local, c.remote, c.to, nil)
		assert.Zero(t, h, name)
		assert.Equal(t, want.Error(), err.Error(), name)
		assert.Equal(t, Status(want.(*Error).Status), Status(err.(*Error).Status), name)
	}
	assert.Equal(t, live, p.init.xfers.len(), "no handle left behind")

	require.NoError(t, p.init.Close())
	_, _, err = p.init.PostXfer(Write, dram(p.initBuf.Desc(0, 4096)), whole, target, nil)
	require.ErrorIs(t, err, ErrClosed)
}
