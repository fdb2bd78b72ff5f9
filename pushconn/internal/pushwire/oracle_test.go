package pushwire

import (
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/internal/oracle"
)

// The PUSH_REG a vLLM push decode sends, built by vLLM's own code
// (NixlPushConnectorScheduler.update_state_after_alloc, then the worker's
// _do_send_reg_notif), is byte for byte the one EncodeRegistration writes
// for the same allocation; and what vLLM's push prefill stores from
// gonixl's bytes (_handle_push_reg_notif) is the registration sent.
func TestOraclePushRegistration(t *testing.T) {
	cases := []Registration{
		{RequestID: "dreq-1", DecodeEngineID: "decode-0", DecodeHost: "127.0.0.1", DecodePort: 5601, DecodeTPSize: 1,
			LocalBlockIDs: [][]int{{5, 6}}, RemoteEngineID: "prefill-0", RemoteHost: "127.0.0.1", RemotePort: 5600, RemoteTPSize: 1, RemotePPSize: 1},
		{RequestID: "cmpl-x-0123abcd", DecodeEngineID: "d", DecodeHost: "localhost", DecodePort: 65535, DecodeTPSize: 4,
			LocalBlockIDs: [][]int{{0, 127, 128, 65536}, {70000}}, RemoteEngineID: "p", RemoteHost: "10.1.2.3", RemotePort: 1, RemoteTPSize: 2, RemotePPSize: 1},
	}
	var built []string
	var parse strings.Builder
	for _, r := range cases {
		b, _ := json.Marshal(map[string]any{
			"request_id": r.RequestID, "engine_id": r.DecodeEngineID, "host": r.DecodeHost, "port": r.DecodePort,
			"tp_size": r.DecodeTPSize, "blocks": r.LocalBlockIDs,
			"params": map[string]any{"do_remote_prefill": true, "remote_engine_id": r.RemoteEngineID,
				"remote_host": r.RemoteHost, "remote_port": r.RemotePort, "tp_size": r.RemoteTPSize},
		})
		// One allocation per process: vLLM's builder runs on a fresh
		// scheduler each time.
		built = append(built, oracle.Run(t, string(b), "pushreg")...)
		ours, err := EncodeRegistration(&r)
		require.NoError(t, err)
		parse.WriteString(hex.EncodeToString(ours) + "\n")
	}
	parsed := oracle.Run(t, parse.String(), "pushreg-parse")
	require.Len(t, built, len(cases))
	require.Len(t, parsed, len(cases))
	for i, r := range cases {
		var b struct{ Notifs []string }
		require.NoError(t, json.Unmarshal([]byte(built[i]), &b))
		require.Len(t, b.Notifs, 1, "one PUSH_REG to the one prefill agent")
		ours, err := EncodeRegistration(&r)
		require.NoError(t, err)
		assert.Equal(t, b.Notifs[0], hex.EncodeToString(ours), "case %d: vLLM's PUSH_REG bytes", i)

		var p struct{ Pending map[string]map[string]any }
		require.NoError(t, json.Unmarshal([]byte(parsed[i]), &p))
		got := p.Pending[r.RequestID]
		require.NotNil(t, got, "vLLM's prefill keeps the registration pending under its request id")
		want := map[string]any{"request_id": r.RequestID, "decode_engine_id": r.DecodeEngineID, "decode_host": r.DecodeHost,
			"decode_port": r.DecodePort, "decode_tp_size": r.DecodeTPSize, "local_block_ids": r.LocalBlockIDs,
			"remote_engine_id": r.RemoteEngineID, "remote_host": r.RemoteHost, "remote_port": r.RemotePort,
			"remote_tp_size": r.RemoteTPSize, "remote_pp_size": r.RemotePPSize}
		wantJSON, _ := json.Marshal(want)
		gotJSON, _ := json.Marshal(got)
		assert.JSONEq(t, string(wantJSON), string(gotJSON))
	}
}
