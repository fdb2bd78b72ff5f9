//go:build nixl && cuda

package gpue2e

import (
	"os"
	"strings"
	"testing"

	"github.com/gonixl/gonixl/nixl"
)

// ucxEnv is the environment a user of VRAM transfers on one host needs too:
// UCX over loopback only, and cuda_ipc for READ (GET), which UCX otherwise
// leaves off on this platform (a 1 GiB READ on one H200 then ran at
// 0.8 GB/s instead of 2 TB/s). UCX_CUDA_IPC_ENABLE_SAME_PROCESS asked older
// UCX releases for cuda_ipc between two agents of one process; UCX 1.22
// reports it unused and never uses cuda_ipc within one process (VRAM then
// moves by software emulation over shared memory: right bytes, low speed).
// Variables the caller set win.
var ucxEnv = [][2]string{
	{"UCX_NET_DEVICES", "lo"},
	{"UCX_CUDA_IPC_ENABLE_GET_ZCOPY", "y"},
	{"UCX_CUDA_IPC_ENABLE_SAME_PROCESS", "y"},
	// NVLink multicast stays off on shared hosts; nothing here uses it.
	{"NCCL_NVLS_ENABLE", "0"},
}

func init() {
	for _, kv := range ucxEnv {
		if _, set := os.LookupEnv(kv[0]); !set {
			os.Setenv(kv[0], kv[1])
		}
	}
}

// ucxParams are the UCX backend's parameters: error handling "none" lets UCX
// pick shared-memory and CUDA IPC transports between agents of one host
// (with the default, DRAM went over TCP on lo); GONIXL_E2E_UCX_PARAMS
// ("k=v,k=v", or "default" for none) overrides them.
func ucxParams() map[string]string {
	v, set := os.LookupEnv("GONIXL_E2E_UCX_PARAMS")
	if !set {
		return map[string]string{"ucx_error_handling_mode": "none"}
	}
	p := map[string]string{}
	if v == "default" {
		return p
	}
	for _, kv := range strings.Split(v, ",") {
		if k, val, ok := strings.Cut(kv, "="); ok {
			p[k] = val
		}
	}
	return p
}

// newAgent creates a native agent with a UCX backend (its calls wrapped by
// ctxAgent when asked), capturing NIXL's telemetry with
// GONIXL_E2E_TELEMETRY=1, closed at the end of the test unless tb is nil.
func newAgent(tb testing.TB, name string, m memory) (nixl.Agent, error) {
	a, err := nixl.New(name, nixl.Config{CaptureTelemetry: telemetryOn()})
	if err != nil {
		return nil, err
	}
	if err := a.CreateBackend("UCX", ucxParams()); err != nil {
		a.Close()
		return nil, err
	}
	var ag nixl.Agent = a
	if os.Getenv("GONIXL_E2E_CUDA_CTX") == "1" {
		ag = &ctxAgent{Agent: a, m: m}
	}
	if tb != nil {
		tb.Cleanup(func() {
			if err := ag.Close(); err != nil {
				tb.Errorf("closing agent %s: %v", name, err)
			}
		})
	}
	return ag, nil
}

// ctxAgent makes the GPU's CUDA context current on the OS thread of every
// agent call (GONIXL_E2E_CUDA_CTX=1). UCX's CUDA transports issue copies
// and IPC calls on the calling thread, a Go program does not choose that
// thread, and a fresh one has no current context. UCX 1.22 makes the
// memory's context current itself: on the H200 the tests and benchmarks
// passed at the same speed without this wrapper, which is therefore off;
// it stays as the switch to try with an older UCX.
type ctxAgent struct {
	nixl.Agent
	m memory
}

func (c *ctxAgent) RegisterMem(d nixl.RegList, o *nixl.Options) (err error) {
	onThread(c.m, func() error { err = c.Agent.RegisterMem(d, o); return nil })
	return err
}

func (c *ctxAgent) DeregisterMem(d nixl.RegList, o *nixl.Options) (err error) {
	onThread(c.m, func() error { err = c.Agent.DeregisterMem(d, o); return nil })
	return err
}

func (c *ctxAgent) LoadRemoteMD(md []byte) (name string, err error) {
	onThread(c.m, func() error { name, err = c.Agent.LoadRemoteMD(md); return nil })
	return name, err
}

func (c *ctxAgent) PrepXferDlist(r string, d nixl.XferList, o *nixl.Options) (h nixl.DlistHandle, err error) {
	onThread(c.m, func() error { h, err = c.Agent.PrepXferDlist(r, d, o); return nil })
	return h, err
}

func (c *ctxAgent) MakeXferReq(op nixl.XferOp, l nixl.DlistHandle, li []int, r nixl.DlistHandle, ri []int, o *nixl.Options) (h nixl.XferHandle, err error) {
	onThread(c.m, func() error { h, err = c.Agent.MakeXferReq(op, l, li, r, ri, o); return nil })
	return h, err
}

func (c *ctxAgent) CreateXferReq(op nixl.XferOp, l, r nixl.XferList, ra string, o *nixl.Options) (h nixl.XferHandle, err error) {
	onThread(c.m, func() error { h, err = c.Agent.CreateXferReq(op, l, r, ra, o); return nil })
	return h, err
}

func (c *ctxAgent) PostXferReq(h nixl.XferHandle, o *nixl.Options) (s nixl.Status, err error) {
	onThread(c.m, func() error { s, err = c.Agent.PostXferReq(h, o); return nil })
	return s, err
}

func (c *ctxAgent) XferStatus(h nixl.XferHandle) (s nixl.Status, err error) {
	onThread(c.m, func() error { s, err = c.Agent.XferStatus(h); return nil })
	return s, err
}

func (c *ctxAgent) ReleaseXferReq(h nixl.XferHandle) (err error) {
	onThread(c.m, func() error { err = c.Agent.ReleaseXferReq(h); return nil })
	return err
}

func (c *ctxAgent) GetNotifs(o *nixl.Options) (n nixl.Notifs, err error) {
	onThread(c.m, func() error { n, err = c.Agent.GetNotifs(o); return nil })
	return n, err
}

func (c *ctxAgent) GenNotif(r string, msg []byte, o *nixl.Options) (err error) {
	onThread(c.m, func() error { err = c.Agent.GenNotif(r, msg, o); return nil })
	return err
}
