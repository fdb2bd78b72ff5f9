//go:build nixl

package nixl

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNativeUnknownAgent(t *testing.T) {
	p := newPeers(t, 4096, Config{})
	_, err := p.init.CreateXferReq(Write, dram(p.initBuf.Desc(0, 4096)), dram(p.tgtBuf.Desc(0, 4096)), "nobody", nil)
	requireNIXLErr(t, err, ErrNotFound)
	assert.Contains(t, err.Error(), `"nobody"`)
	_, err = p.init.PrepXferDlist("nobody", dram(p.tgtBuf.Desc(0, 4096)), nil)
	requireNIXLErr(t, err, ErrNotFound)
	assert.Contains(t, err.Error(), `remote agent "nobody"`)
	require.ErrorIs(t, p.init.CheckRemoteMD("nobody", XferList{Mem: DRAM}), ErrNotFound)
	require.Error(t, p.init.GenNotif("nobody", []byte("x"), nil))
	require.Error(t, p.init.MakeConnection("nobody", nil))
	require.Error(t, p.init.InvalidateRemoteMD("nobody"))
	err = p.init.GenNotif("", []byte("x"), nil)
	require.ErrorIs(t, err, ErrInvalidParam)
}

func TestNativeBadDescriptors(t *testing.T) {
	p := newPeers(t, 8192, Config{})
	stray := newBuffer(t, 4096, 0)
	target := p.target.Name()
	whole := dram(p.tgtBuf.Desc(0, 4096))

	// Local memory that was never registered.
	_, err := p.init.CreateXferReq(Write, dram(stray.Desc(0, 4096)), whole, target, nil)
	requireNIXLErr(t, err, ErrNotFound)
	// Remote range past the registered buffer.
	_, err = p.init.CreateXferReq(Write, dram(p.initBuf.Desc(0, 4096)), dram(p.tgtBuf.Desc(8192-100, 4096)), target, nil)
	requireNIXLErr(t, err, ErrNotFound)
	// Lengths differ.
	_, err = p.init.CreateXferReq(Write, dram(p.initBuf.Desc(0, 4096)), dram(p.tgtBuf.Desc(0, 2048)), target, nil)
	requireNIXLErr(t, err, ErrInvalidParam)
	// Counts differ.
	_, err = p.init.CreateXferReq(Write, dram(p.initBuf.Desc(0, 2048), p.initBuf.Desc(2048, 2048)), whole, target, nil)
	requireNIXLErr(t, err, ErrInvalidParam)
	// Memory types NIXL does not define, and an unknown operation.
	_, err = p.init.CreateXferReq(Write, XferList{Mem: MemType(9), Descs: []Desc{p.initBuf.Desc(0, 4096)}}, whole, target, nil)
	require.ErrorIs(t, err, ErrInvalidParam)
	assert.Contains(t, err.Error(), "unknown memory type 9")
	_, err = p.init.CreateXferReq(XferOp(7), dram(p.initBuf.Desc(0, 4096)), whole, target, nil)
	require.ErrorIs(t, err, ErrInvalidParam)
	require.ErrorIs(t, p.init.RegisterMem(RegList{Mem: MemType(-1)}, nil), ErrInvalidParam)
	// Deregistering memory that is not registered.
	require.Error(t, p.init.DeregisterMem(regDRAM(stray), nil))
	// Preparing unregistered local memory.
	_, err = p.init.PrepXferDlist("", dram(stray.Desc(0, 4096)), nil)
	requireNIXLErr(t, err, ErrNotFound)
	assert.Contains(t, err.Error(), "the local side")

	ld, err := p.init.PrepXferDlist("", dram(p.initBuf.Desc(0, 4096)), nil)
	require.NoError(t, err)
	rd, err := p.init.PrepXferDlist(target, whole, nil)
	require.NoError(t, err)
	for name, idx := range map[string][2][]int{
		"index out of range": {{1}, {0}},
		"negative index":     {{-1}, {0}},
		"index beyond int32": {{0}, {1 << 33}},
		"counts differ":      {{0, 0}, {0}},
		"no indices":         {{}, {}},
	} {
		_, err := p.init.MakeXferReq(Write, ld, idx[0], rd, idx[1], nil)
		require.ErrorIs(t, err, ErrInvalidParam, name)
	}
	// Sides swapped: the local list must be local and the remote one remote.
	_, err = p.init.MakeXferReq(Write, rd, []int{0}, ld, []int{0}, nil)
	require.ErrorIs(t, err, ErrInvalidParam)

	// Nothing above left a request behind.
	assert.Zero(t, p.init.xfers.len())
}

func TestNativeReleaseTwiceAndForeignHandles(t *testing.T) {
	p := newPeers(t, 4096, Config{})
	req, err := p.init.CreateXferReq(Write, dram(p.initBuf.Desc(0, 4096)), dram(p.tgtBuf.Desc(0, 4096)), p.target.Name(), nil)
	require.NoError(t, err)
	dl, err := p.init.PrepXferDlist("", dram(p.initBuf.Desc(0, 4096)), nil)
	require.NoError(t, err)

	// The other agent does not know these handles.
	require.ErrorIs(t, p.target.ReleaseXferReq(req), ErrInvalidParam)
	require.ErrorIs(t, p.target.ReleaseDlistHandle(dl), ErrInvalidParam)
	_, err = p.target.XferStatus(req)
	require.ErrorIs(t, err, ErrInvalidParam)
	// A list handle is not a request handle.
	require.ErrorIs(t, p.init.ReleaseXferReq(XferHandle(dl)), ErrInvalidParam)

	require.NoError(t, p.init.ReleaseXferReq(req))
	err = p.init.ReleaseXferReq(req)
	require.ErrorIs(t, err, ErrInvalidParam)
	assert.Contains(t, err.Error(), "released already")
	require.NoError(t, p.init.ReleaseDlistHandle(dl))
	require.ErrorIs(t, p.init.ReleaseDlistHandle(dl), ErrInvalidParam)

	for name, err := range map[string]error{
		"post":      second(p.init.PostXferReq(req, nil)),
		"status":    second(p.init.XferStatus(req)),
		"backend":   second(p.init.QueryXferBackend(req)),
		"telemetry": second(p.init.XferTelemetry(req)),
		"cost":      second(p.init.EstimateXferCost(req, nil)),
		"zero":      p.init.ReleaseXferReq(0),
		"make":      second(p.init.MakeXferReq(Write, dl, []int{0}, dl, []int{0}, nil)),
	} {
		assert.ErrorIs(t, err, ErrInvalidParam, name)
	}
}

func second[T any](_ T, err error) error { return err }

func TestNativeCreateAgentErrors(t *testing.T) {
	_, err := New("", Config{})
	require.ErrorIs(t, err, ErrInvalidParam)
	_, err = New("x", Config{SyncMode: ThreadSync(5)})
	require.ErrorIs(t, err, ErrInvalidParam)

	// Two listeners on one port: the second agent cannot be created.
	port := freePort(t)
	newAgent(t, testName(t)+".first", Config{ListenThread: true, ListenPort: uint16(port)})
	_, err = New(testName(t)+".second", Config{ListenThread: true, ListenPort: uint16(port)})
	requireNIXLErr(t, err, ErrUnknown, "NIXL throws; the shim reports the exception as NIXL_ERR_UNKNOWN")
	assert.Contains(t, err.Error(), "nixlAgent::nixlAgent")
	assert.Contains(t, err.Error(), fmt.Sprintf("is listener port %d free?", port))
}
