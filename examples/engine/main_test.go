package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

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
