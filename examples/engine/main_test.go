package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gonixl/gonixl/examples/discovery"
	"github.com/gonixl/gonixl/examples/discovery/etcdtest"
	"github.com/gonixl/gonixl/examples/engine/server"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseParams(t *testing.T) {
	p, err := parseParams("")
	require.NoError(t, err)
	assert.Nil(t, p)
	p, err = parseParams("ucx_error_handling_mode=none, num_workers=2")
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"ucx_error_handling_mode": "none", "num_workers": "2"}, p)
	_, err = parseParams("nokey")
	assert.EqualError(t, err, `-nixl-backend-params: "nokey" is not key=value`)
}

func TestRegisterInEtcd(t *testing.T) {
	srv := etcdtest.Start(t)
	fab, err := loopback.NewFabric()
	require.NoError(t, err)
	defer fab.Close()
	s, err := server.New(server.Config{Role: server.RoleDecode, Connector: server.ConnPush, EngineID: "d7", NumBlocks: 8,
		NewAgent: func(name string) (nixl.Agent, error) { return fab.NewAgent(name) }})
	require.NoError(t, err)
	defer s.Close(context.Background())

	deregister, err := register(s, srv.Endpoint, "t", 2*time.Second, 10*time.Second, zap.NewNop())
	require.NoError(t, err)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint}, Logger: zap.NewNop()})
	require.NoError(t, err)
	defer cli.Close()
	ctx := context.Background()
	resp, err := cli.Get(ctx, "/gonixl/t/engines/decode/d7")
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)
	rec, err := discovery.Decode("t", "/gonixl/t/engines/decode/d7", resp.Kvs[0].Value)
	require.NoError(t, err)
	assert.Equal(t, s.Record(), rec)
	assert.Equal(t, "push", rec.Connector)
	assert.Equal(t, s.URL(), rec.URL())
	info := s.Info()
	assert.Equal(t, fmt.Sprintf("%s:%d", info.SideChannelHost, info.SideChannelPort), rec.SideChannelAddr)

	require.NoError(t, deregister(ctx))
	resp, err = cli.Get(ctx, "/gonixl/t/engines/", clientv3.WithPrefix())
	require.NoError(t, err)
	assert.Empty(t, resp.Kvs, "the key outlived the graceful shutdown")

	_, err = register(s, "127.0.0.1:1", "t", time.Second, 500*time.Millisecond, zap.NewNop())
	assert.ErrorContains(t, err, "-etcd 127.0.0.1:1")
}

func TestLoopbackEngineRefusesEtcd(t *testing.T) {
	// No etcd listens on the endpoint: the engine must stop before it
	// tries, and before it opens its ports.
	err := run([]string{"-agent", "loopback", "-etcd", "127.0.0.1:1", "-port", "0", "-side-channel-port", "0", "-log-level", "error"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "-etcd 127.0.0.1:1: refusing to register: this engine's agents are loopback (in-process) agents, which cannot move KV to or from engines in other processes")
	assert.Contains(t, err.Error(), "drop -etcd to serve only requests without kv_transfer_params")

	_, probeErr := nixl.New("probe", nixl.Config{})
	if errors.Is(probeErr, nixl.ErrUnavailable) {
		assert.Contains(t, err.Error(), "this build has no NIXL: rebuild with -tags nixl")
	} else {
		assert.Contains(t, err.Error(), "-agent loopback chose in-process agents (use -agent nixl or auto)")
	}
}

func TestCheckRegistrable(t *testing.T) {
	assert.NoError(t, checkRegistrable("", agentKind{noNIXL: true}), "no -etcd: loopback agents serve local requests")
	assert.NoError(t, checkRegistrable("e:2379", agentKind{native: true, backend: "UCX"}))
	assert.EqualError(t, checkRegistrable("e:2379", agentKind{noNIXL: true}),
		"-etcd e:2379: refusing to register: this engine's agents are loopback (in-process) agents, which cannot move KV to or from engines in other processes; this build has no NIXL: rebuild with -tags nixl (NIXL installed, docs/binding.md), or drop -etcd to serve only requests without kv_transfer_params")
	assert.ErrorContains(t, checkRegistrable("e:2379", agentKind{}), "-agent loopback chose in-process agents (use -agent nixl or auto)")
}

func TestForceOnSecondSignal(t *testing.T) {
	sigs := make(chan os.Signal, 1)
	core, logs := observer.New(zapcore.InfoLevel)
	code := make(chan int, 1)
	go forceOnSecondSignal(sigs, zap.New(core), func(c int) { code <- c })
	sigs <- syscall.SIGINT
	select {
	case c := <-code:
		assert.Equal(t, 1, c)
	case <-time.After(5 * time.Second):
		t.Fatal("no exit on the second signal")
	}
	assert.Equal(t, 1, logs.FilterMessage("second signal: exiting now, without draining").Len())
}

func TestParseSidePort(t *testing.T) {
	p, err := parseSidePort("5600")
	require.NoError(t, err)
	assert.Equal(t, 5600, p)
	_, err = parseSidePort("56OO")
	assert.EqualError(t, err, `-side-channel-port (or $VLLM_NIXL_SIDE_CHANNEL_PORT) is "56OO", want a port 0..65535 (vLLM's default is 5600)`)
}
