package pushconn

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The engine may reuse its block-id slices as soon as Register and
// RequestFinished return; the WRITE must still use the blocks given at the
// call.
func TestCallersBlockSlicesAreCopied(t *testing.T) {
	r := newRig(t, rigConfig{})
	c, p := r.consumers[0], r.producers[0]
	src := blocksFrom(0, 2)
	dst := blocksFrom(4, 2)
	fill(t, r.preLayout[0], src, 9, 32)
	zero(t, r.decLayout[0], append([]int{60, 61}, dst...))
	dstArg := append([]int(nil), dst...)
	require.NoError(t, c.Register("alias", Coordinates(r.pre), dstArg))
	dstArg[0], dstArg[1] = 60, 61 // the engine reuses its scratch slice
	admitted(t, p, 1)
	srcArg := append([]int(nil), src...)
	params, err := p.RequestFinished("alias", srcArg)
	require.NoError(t, err)
	srcArg[0], srcArg[1] = 50, 51 // likewise on prefill
	params.RemoteBlockIDs[0] = 52 // and the returned params are the caller's too
	res := await(t, c, 1)
	require.NoError(t, res[0].Err)
	check(t, r.decLayout[0], dst, 0, 9, 32)
	written := 0
	visit(t, r.decLayout[0], []int{60, 61}, 0, 32, func(b *byte, _, _, _, _ int) {
		if *b != 0 {
			written++
		}
	})
	require.Zero(t, written, "the WRITE followed the caller's reused slice")
	freedOnce(t, p, "alias")
}
