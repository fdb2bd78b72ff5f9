package groupids

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// A group without blocks goes on the wire as [] (as [null] a reader took
// it for one group holding block 0), and RoundTrip gives what Decode reads
// back from OnWire's JSON, as copies.
func TestOnWireAndRoundTrip(t *testing.T) {
	for _, c := range []struct {
		flat   []int
		groups [][]int
	}{
		{nil, nil}, {[]int{}, nil}, {[]int{4, 5}, nil}, {nil, [][]int{}}, {nil, [][]int{nil}},
		{nil, [][]int{{1}}}, {nil, [][]int{nil, {2, 3}}}, {nil, [][]int{{}, {7}, nil}},
	} {
		b, err := json.Marshal(OnWire(c.flat, c.groups))
		require.NoError(t, err)
		require.NotContains(t, string(b), "null]", "%v %v", c.flat, c.groups)
		wf, wg, err := Decode(b)
		require.NoError(t, err)
		f, g := RoundTrip(c.flat, c.groups)
		require.Equal(t, wf, f, "%s", b)
		require.Equal(t, wg, g, "%s", b)
	}
	flat := []int{1, 2}
	f, _ := RoundTrip(flat, nil)
	f[0] = 9
	require.Equal(t, 1, flat[0], "a copy")
	groups := [][]int{{1}, {2}}
	_, g := RoundTrip(nil, groups)
	g[1][0] = 9
	require.Equal(t, 2, groups[1][0], "a copy")
}

func TestConvertRefusesTypesWithoutBlockLists(t *testing.T) {
	type lists struct {
		RemoteBlockIDs      []int
		RemoteGroupBlockIDs [][]int
	}
	var to lists
	require.NoError(t, Convert(lists{RemoteBlockIDs: []int{1}}, &to))
	require.Equal(t, []int{1}, to.RemoteBlockIDs)
	var s string
	require.ErrorContains(t, Convert(lists{}, &s), "groupids: a *string has no block-list fields")
	require.ErrorContains(t, Convert(3, &to), "groupids: a *int has no block-list fields")
}
