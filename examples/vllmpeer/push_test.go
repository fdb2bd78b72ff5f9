package vllmpeer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/examples/vllmpeer"
)

// Push between two peers, as vLLM's push connector runs it: decode's
// notif-only handshake and PUSH_REG (11 keys) to every prefill agent it
// handshook, prefill's full handshake back to decode and WRITEs with
// "<decode request id>:<P_tp>", decode counting pp*max(1, P_tp/D_tp) per
// rank; every byte verified. The decode request id carries another random
// suffix than prefill's, as behind vLLM's proxy.
func TestPushPeerToPeer(t *testing.T) {
	for _, tc := range tpCases {
		for _, regFirst := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/registration-first=%v", tc.name, regFirst), func(t *testing.T) {
				fab := newFabric(t)
				pre := newPeer(t, fab, "prefill", tc.prefill, vllmpeer.ModePush)
				dec := newPeer(t, fab, "decode", tc.decode, vllmpeer.ModePush)
				_, toks := prompt(70)
				pblocks, dblocks := blocksFrom(3, 5), blocksFrom(20, 5)
				info := vllmpeer.PrefillInfo{EngineID: "prefill", Host: pre.Host(), Port: pre.Port(), TPSize: tc.prefill}
				register := func() {
					require.NoError(t, dec.PushRegister(context.Background(), "cmpl-7-0000beef", info, dblocks))
				}
				if regFirst {
					register()
				}
				prm, err := pre.PushFinished("cmpl-7-1234abcd", toks, pblocks)
				require.NoError(t, err)
				assert.Equal(t, "push", prm.TransferMode)
				if !regFirst {
					register()
				}
				require.NoError(t, dec.WaitPushed("cmpl-7-0000beef", 10*time.Second))
				require.NoError(t, pre.WaitWritten("cmpl-7-1234abcd", 10*time.Second))
				c := dec.Verify(toks, dblocks)
				require.Zero(t, c.BadBytes, c.First)

				count, expected := dec.PushCounts("cmpl-7-0000beef")
				want := max(1, tc.prefill/tc.decode)
				for r := range tc.decode {
					assert.Equal(t, want, expected[r], "decode rank %d", r)
					assert.Equal(t, want, count[r], "decode rank %d", r)
					wantN := make([]string, want)
					for i := range wantN {
						wantN[i] = fmt.Sprintf("cmpl-7-0000beef:%d", tc.prefill)
					}
					assert.Equal(t, wantN, dec.Report().Notifs[r], "decode rank %d", r)
				}
				// Every decode rank registers with every prefill rank it
				// handshook; a prefill rank writes once, on the first.
				rep := awaitPushRegs(t, pre, tc.prefill*max(1, tc.decode/tc.prefill), 20*time.Second)
				regs := map[int]int{}
				for _, s := range rep.PushRegs {
					regs[s.Rank]++
					assert.Equal(t, []string{"request_id", "decode_engine_id", "decode_host", "decode_port", "decode_tp_size", "local_block_ids",
						"remote_engine_id", "remote_host", "remote_port", "remote_tp_size", "remote_pp_size"}, s.Keys)
					assert.Equal(t, vllmpeer.PushReg{RequestID: "cmpl-7-0000beef", DecodeEngineID: "decode", DecodeHost: dec.Host(), DecodePort: dec.Port(),
						DecodeTPSize: tc.decode, LocalBlockIDs: [][]int{dblocks}, RemoteEngineID: "prefill", RemoteHost: pre.Host(), RemotePort: pre.Port(),
						RemoteTPSize: tc.prefill, RemotePPSize: 1}, s.Reg)
				}
				for r := range tc.prefill {
					assert.Equal(t, max(1, tc.decode/tc.prefill), regs[r], "PUSH_REGs on prefill rank %d", r)
				}
				assert.Equal(t, []string{"cmpl-7-1234abcd"}, rep.Written)
				assert.Empty(t, rep.Problems)
			})
		}
	}
}

// A push decode of another hash (a pull engine, here) is refused at the
// notif-only handshake, before any PUSH_REG goes out.
func TestPushHashMismatch(t *testing.T) {
	fab := newFabric(t)
	pre := newPeer(t, fab, "prefill", 1, vllmpeer.ModePull)
	dec := newPeer(t, fab, "decode", 1, vllmpeer.ModePush)
	err := dec.PushRegister(context.Background(), "r", vllmpeer.PrefillInfo{EngineID: "prefill", Host: pre.Host(), Port: pre.Port(), TPSize: 1}, []int{1})
	require.ErrorIs(t, err, vllmpeer.ErrHashMismatch)
	assert.EqualError(t, err, "NIXL compatibility hash mismatch. Local: "+dec.Hash()+", Remote: "+pre.Hash())
	assert.Empty(t, pre.Report().Notifs[0])
}
