//go:build nixl

package nixl

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNativeReleaseXferReqs releases a list of requests in one call, under
// SyncNone (one crossing) and SyncStrict (one call per request): every live
// one is released and then unknown, an unknown handle and a repeat get
// ErrInvalidParam, and the list may be longer than the call's stack buffer.
func TestNativeReleaseXferReqs(t *testing.T) {
	for _, mode := range []ThreadSync{SyncNone, SyncStrict} {
		t.Run(fmt.Sprint(mode), func(t *testing.T) {
			const n, blk = 40, 1024
			p := newPeers(t, n*blk, Config{SyncMode: mode})
			reqs := make([]XferHandle, n)
			for i := range reqs {
				var err error
				reqs[i], err = p.init.CreateXferReq(Write, dram(p.initBuf.Desc(uint64(i*blk), blk)), dram(p.tgtBuf.Desc(uint64(i*blk), blk)), p.target.Name(), nil)
				require.NoError(t, err)
			}
			p.run(reqs[3], nil)
			requireBytes(t, p.initBuf.Bytes()[3*blk:4*blk], p.tgtBuf.Bytes()[3*blk:4*blk], "WRITE before the release")

			list := append([]XferHandle{reqs[0], 1 << 62, reqs[0]}, reqs[1:]...)
			errs := make([]error, len(list))
			require.NoError(t, p.init.ReleaseXferReqs(list, errs))
			for i, err := range errs {
				switch i {
				case 1, 2:
					require.ErrorIs(t, err, ErrInvalidParam, "entry %d", i)
					assert.ErrorContains(t, err, "is not live on agent")
				default:
					require.NoError(t, err, "entry %d", i)
				}
			}
			assert.Zero(t, p.init.xfers.len(), "handles left in the table")
			for _, h := range reqs {
				_, err := p.init.XferStatus(h)
				require.ErrorIs(t, err, ErrInvalidParam)
			}
		})
	}
}

// TestNativeReleaseXferReqsCallErrors: a short errs slice releases nothing,
// and after Close the call reports ErrClosed.
func TestNativeReleaseXferReqsCallErrors(t *testing.T) {
	p := newPeers(t, 4096, Config{})
	req, err := p.init.CreateXferReq(Write, dram(p.initBuf.Desc(0, 4096)), dram(p.tgtBuf.Desc(0, 4096)), p.target.Name(), nil)
	require.NoError(t, err)

	err = p.init.ReleaseXferReqs([]XferHandle{req}, nil)
	require.ErrorIs(t, err, ErrInvalidParam)
	assert.ErrorContains(t, err, "0 error slots for 1 requests")
	require.NoError(t, p.init.ReleaseXferReq(req), "the request must still be live")

	req, err = p.init.CreateXferReq(Write, dram(p.initBuf.Desc(0, 4096)), dram(p.tgtBuf.Desc(0, 4096)), p.target.Name(), nil)
	require.NoError(t, err)
	require.NoError(t, p.init.Close())
	errs := make([]error, 1)
	err = p.init.ReleaseXferReqs([]XferHandle{req}, errs)
	require.True(t, errors.Is(err, ErrClosed), "got %v", err)
	require.ErrorIs(t, ReleaseXferReqs(p.init, nil, nil), ErrClosed, "an empty list on a closed agent, through the package function")
}
