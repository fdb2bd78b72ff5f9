package pullconn

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Load's Params stay the caller's: the reader goroutine must READ the
// blocks named at the call even if the caller then reuses the slice.
func TestLoadCopiesRemoteBlockIDs(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	c.fill(3, []int{1, 2}, 32)
	p := c.finish("req-1", []int{1, 2})
	local := []int{7, 8}
	require.NoError(t, c.cons[0].Load("d", p, local))
	p.RemoteBlockIDs[0], p.RemoteBlockIDs[1] = 40, 41 // caller reuses its Params
	local[0], local[1] = 30, 31
	r := c.result("d")
	require.NoError(t, r[0].Err)
	c.verify(3, []int{7, 8}, 0, 32)
}
