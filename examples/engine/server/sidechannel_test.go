package server

import (
	"context"
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/internal/portpick"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// freePort returns a TCP port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	p, err := portpick.Pick()
	require.NoError(t, err)
	return p
}

// In vLLM's protocol the engine listens where a vLLM instance with
// VLLM_NIXL_SIDE_CHANNEL_PORT=base and data-parallel index 2 would: on
// base+2, on vLLM's default host "localhost" resolved to an address (libzmq
// cannot bind tcp://localhost:N), and advertises that address and port.
func TestVLLMSideChannelPortAndHost(t *testing.T) {
	fab, err := loopback.NewFabric()
	require.NoError(t, err)
	defer fab.Close()
	base := freePort(t) - 2 // base+2 was free a moment ago
	s, err := New(Config{Role: RolePrefill, Connector: ConnPull, Protocol: ProtocolVLLM, VLLMVersion: "0.11.0", AttentionBackend: "FLASH_ATTN", EngineID: "p-dp2",
		NumBlocks: 8, SideChannelPort: base, DataParallelIndex: 2,
		NewAgent: func(name string) (nixl.Agent, error) { return fab.NewAgent(name) }})
	require.NoError(t, err)
	defer s.Close(context.Background())
	info := s.Info()
	assert.Equal(t, base+2, info.SideChannelPort)
	assert.Equal(t, "127.0.0.1", info.SideChannelHost)
	// Something listens there: the port is taken.
	_, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(base+2)))
	require.Error(t, err)
}

// gonixl's protocol adds the index too, and keeps its 127.0.0.1 default.
func TestSideChannelDefaults(t *testing.T) {
	c, err := Config{Role: RoleDecode, NewAgent: func(string) (nixl.Agent, error) { return nil, nil }, SideChannelPort: 5600, DataParallelIndex: 3}.withDefaults()
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1", c.SideChannelHost)
	assert.Equal(t, "127.0.0.1:5603", c.engineConfig().ListenAddr)
	c, err = Config{Role: RoleDecode, NewAgent: func(string) (nixl.Agent, error) { return nil, nil }, Protocol: ProtocolVLLM}.withDefaults()
	require.NoError(t, err)
	assert.Equal(t, "localhost:0", c.engineConfig().ListenAddr, "port 0 (any) is not offset")
	_, err = Config{Role: RoleDecode, NewAgent: func(string) (nixl.Agent, error) { return nil, nil }, SideChannelPort: 65535, DataParallelIndex: 1}.withDefaults()
	assert.EqualError(t, err, "engine: Config.DataParallelIndex is 1: the side channel port 65535 + 1 is not a port (want 0..0)")
	_, err = Config{Role: RoleDecode, NewAgent: func(string) (nixl.Agent, error) { return nil, nil }, SideChannelPort: 70000}.withDefaults()
	assert.EqualError(t, err, "engine: Config.SideChannelPort is 70000, want 0..65535 (0: a free port)")
}
