//go:build !nixl

package nixl

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStubNewSaysHowToBuild(t *testing.T) {
	a, err := New("prefill-0", Config{})
	assert.Nil(t, a)
	require.ErrorIs(t, err, ErrUnavailable)
	assert.Equal(t, "nixl: the native NIXL agent is not available in this build: rebuild with `-tags nixl` and NIXL installed: its Python wheel, with CGO_LDFLAGS from `go run github.com/gonixl/gonixl/nixl/cmd/nixl-flags`, or a source build in /opt/nvidia/nvda_nixl; agent \"prefill-0\" not created", err.Error())
	assert.Equal(t, StatusUnknown, StatusOf(err), "ErrUnavailable carries no NIXL status")
}

func TestStubMethodsReturnUnavailable(t *testing.T) {
	var a NativeAgent
	var errs []error
	collect := func(err error) { errs = append(errs, err) }
	_, err := a.AvailPlugins()
	collect(err)
	_, _, err = a.PluginParams("UCX")
	collect(err)
	collect(a.CreateBackend("UCX", nil))
	_, _, err = a.BackendParams("UCX")
	collect(err)
	collect(a.RegisterMem(RegList{}, nil))
	collect(a.DeregisterMem(RegList{}, nil))
	_, err = a.QueryMem(RegList{}, nil)
	collect(err)
	_, err = a.LocalMD()
	collect(err)
	_, err = a.LocalPartialMD(RegList{}, nil)
	collect(err)
	_, err = a.LoadRemoteMD(nil)
	collect(err)
	collect(a.InvalidateRemoteMD("b"))
	collect(a.CheckRemoteMD("b", XferList{}))
	collect(a.SendLocalMD(nil))
	collect(a.SendLocalPartialMD(RegList{}, nil))
	collect(a.FetchRemoteMD("b", nil))
	collect(a.InvalidateLocalMD(nil))
	collect(a.MakeConnection("b", nil))
	_, err = a.PrepXferDlist("", XferList{}, nil)
	collect(err)
	collect(a.ReleaseDlistHandle(1))
	_, err = a.MakeXferReq(Write, 1, nil, 2, nil, nil)
	collect(err)
	_, err = a.CreateXferReq(Write, XferList{}, XferList{}, "b", nil)
	collect(err)
	_, err = a.EstimateXferCost(1, nil)
	collect(err)
	_, err = a.PostXferReq(1, nil)
	collect(err)
	_, err = a.XferStatus(1)
	collect(err)
	_, err = a.QueryXferBackend(1)
	collect(err)
	_, err = a.XferTelemetry(1)
	collect(err)
	collect(a.ReleaseXferReq(1))
	_, err = a.GetNotifs(nil)
	collect(err)
	_, err = a.AppendNotifs(nil, nil)
	collect(err)
	collect(a.GenNotif("b", []byte("m"), nil))
	collect(a.Poll(nil, nil, Notifs{}))

	require.Len(t, errs, 31)
	for i, err := range errs {
		assert.True(t, errors.Is(err, ErrUnavailable), "call %d: %v", i, err)
		assert.Contains(t, err.Error(), "nixlAgent::", "call %d names the NIXL call", i)
		assert.Contains(t, err.Error(), "-tags nixl", "call %d says how to build", i)
	}
	assert.NoError(t, a.Close())
	assert.Empty(t, a.Name())
}
