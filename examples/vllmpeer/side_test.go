package vllmpeer

import (
	"context"
	"io"
	"log"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

// The listener binds vLLM's default host "localhost" by resolving it,
// answers GET_META_MSG with two frames (the payload, a float64 timestamp
// on its monotonic clock), and outlives a malformed request, which it
// records (vLLM's listener thread would die on one).
func TestListener(t *testing.T) {
	inner, _ := encode(&agentMetadata{EngineID: "e", RegionMembers: [][]string{}})
	payload, _ := encode(&handshakePayload{CompatibilityHash: "h", AgentMetadataBytes: inner})
	s, err := listen("localhost", 0, map[[2]int][]byte{{0, 0}: payload})
	require.NoError(t, err)
	defer s.close()
	assert.NotNil(t, net.ParseIP(s.host), "resolved: %s", s.host)

	ask := func(frame []byte) (zmq4.Msg, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		sock := zmq4.NewReq(ctx, zmq4.WithLogger(log.New(io.Discard, "", 0)))
		defer sock.Close()
		require.NoError(t, sock.Dial("tcp://"+net.JoinHostPort(s.host, strconv.Itoa(s.port))))
		require.NoError(t, sock.Send(zmq4.NewMsg(frame)))
		ch := make(chan zmq4.Msg, 1)
		go func() {
			m, err := sock.Recv()
			if err == nil {
				ch <- m
			}
			close(ch)
		}()
		select {
		case m, ok := <-ch:
			if !ok {
				return zmq4.Msg{}, context.Canceled
			}
			return m, nil
		case <-ctx.Done():
			return zmq4.Msg{}, ctx.Err()
		}
	}
	bad, _ := msgpack.Marshal([]any{[]byte(getMetaMsg), 0})
	_, err = ask(bad)
	require.Error(t, err, "no answer to a malformed request")
	wrongRank, _ := getMetaRequest(0, 1)
	_, err = ask(wrongRank)
	require.Error(t, err, "no answer for a rank the engine does not have")

	req, _ := getMetaRequest(0, 0)
	before := monotonic()
	m, err := ask(req)
	require.NoError(t, err)
	require.Len(t, m.Frames, 2)
	assert.Equal(t, payload, m.Frames[0])
	assert.Equal(t, byte(0xcb), m.Frames[1][0], "a float64")
	ts, err := parseTimestamp(m.Frames[1])
	require.NoError(t, err)
	assert.GreaterOrEqual(t, ts, before)
	s.mu.Lock()
	defer s.mu.Unlock()
	assert.Equal(t, 1, s.asks)
	assert.Equal(t, []string{"vllmpeer: GET_META_MSG request has 2 elements, want 3", "GET_META_MSG for pp 0 tp 1, which this engine does not have"}, s.bad)
}
