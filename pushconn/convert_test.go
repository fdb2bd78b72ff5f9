package pushconn

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
)

// convert (groupids.Convert, the block lists copied directly) gives what
// push's Params give through their JSON, flat or grouped, with or without
// a transfer id.
func TestConvertMatchesJSON(t *testing.T) {
	for _, p := range []Params{
		{TransferParams: connector.TransferParams{DoRemotePrefill: true, RemoteBlockIDs: []int{3, 1, 2}, RemoteEngineID: "p", RemotePort: 1, TPSize: 2}, PPSize: 1, TransferMode: modePush},
		{TransferParams: connector.TransferParams{RemoteGroupBlockIDs: [][]int{{1}, nil, {5, 6}}, RemoteHost: "h"}, PPSize: 2, NumTokens: 40, TransferMode: modePush, TransferID: "t-1"},
		{TransferMode: modePush},
	} {
		var fast, slow connector.Params
		require.NoError(t, convert(p, &fast))
		b, err := json.Marshal(p)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(b, &slow))
		require.Equal(t, slow, fast, "%s", b)
	}
}
