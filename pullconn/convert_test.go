package pullconn

import (
	"encoding/json"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/connector"
)

// jsonConvert is the conversion convert stands for: the whole object
// through its JSON.
func jsonConvert(from, to any) error {
	b, err := json.Marshal(from)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, to)
}

func randomLists(rng *rand.Rand) ([]int, [][]int) {
	ids := func() []int {
		switch rng.IntN(4) {
		case 0:
			return nil
		case 1:
			return []int{}
		}
		out := make([]int, rng.IntN(2000))
		for i := range out {
			out[i] = rng.IntN(1 << 20)
		}
		return out
	}
	switch rng.IntN(4) {
	case 0:
		return nil, nil
	case 1:
		return ids(), nil
	case 2:
		return nil, [][]int{}
	}
	groups := make([][]int, 1+rng.IntN(3))
	for g := range groups {
		groups[g] = ids()
	}
	return nil, groups
}

// convert gives what a JSON round trip gives, both ways, for flat, grouped,
// empty and absent block lists beside every other key, and shares no list
// with its input.
func TestConvertIsTheJSONRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 8))
	for i := range 300 {
		var p Params
		p.RemoteBlockIDs, p.RemoteGroupBlockIDs = randomLists(rng)
		p.RemoteEngineID, p.RemoteHost, p.RemotePort, p.TPSize = "prefill", "10.0.0.1", 5600+i, 1+rng.IntN(8)
		p.DoRemotePrefill, p.PPSize, p.NumTokens, p.TransferMode = rng.IntN(2) == 0, rng.IntN(3), rng.IntN(9000), "pull"
		p.RemoteBlocksExpiryTime, p.RemoteHoldNonce, p.RemoteIncarnation = float64(rng.IntN(1e6)), rng.Uint64(), rng.Uint64()
		if rng.IntN(2) == 0 {
			slot := rng.IntN(8)
			p.RemoteStagingSlot, p.RemoteStagingAwait = &slot, true
		}
		var fast, slow connector.Params
		require.NoError(t, convert(p, &fast))
		require.NoError(t, jsonConvert(p, &slow))
		require.Equal(t, slow, fast, "case %d: to connector.Params", i)
		if len(fast.RemoteBlockIDs) > 0 && len(p.RemoteBlockIDs) > 0 {
			fast.RemoteBlockIDs[0]++
			require.NotEqual(t, fast.RemoteBlockIDs[0], p.RemoteBlockIDs[0], "a copy")
			fast.RemoteBlockIDs[0]--
		}
		slow.Extra = map[string]json.RawMessage{"peer_key": json.RawMessage(`{"a":[1,2]}`)}
		fast.Extra = slow.Extra
		var back, backSlow Params
		require.NoError(t, convert(fast, &back))
		require.NoError(t, jsonConvert(slow, &backSlow))
		require.Equal(t, backSlow, back, "case %d: back to Params", i)
	}
}

func BenchmarkConvertParams(b *testing.B) {
	blocks := make([]int, 1024)
	for i := range blocks {
		blocks[i] = i * 3
	}
	p := Params{TransferParams: connector.TransferParams{DoRemotePrefill: true, RemoteEngineID: "prefill-abc", RemoteHost: "10.0.0.1",
		RemotePort: 5600, RemoteBlockIDs: blocks, RemoteRequestID: "cmpl-1234", TPSize: 8}, RemoteHoldNonce: 7, RemoteBlocksExpiryTime: 1e9}
	for _, c := range []struct {
		name string
		f    func(any, any) error
	}{{"json", jsonConvert}, {"convert", func(from, to any) error { return convert(from.(Params), to.(*connector.Params)) }}} {
		b.Run(c.name+"/1024-blocks", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var out connector.Params
				if err := c.f(p, &out); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
