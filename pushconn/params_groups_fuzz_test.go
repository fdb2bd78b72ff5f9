package pushconn

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzParamsJSON reads kv_transfer_params from the network (through the
// proxy): any bytes either fail to decode or give Params that Validate
// judges without panicking and that survive a round trip through JSON
// unchanged, grouped or not.
func FuzzParamsJSON(f *testing.F) {
	for _, s := range []string{
		`{"do_remote_prefill":true,"remote_block_ids":[1,2],"remote_engine_id":"e","remote_request_id":"r","remote_host":"h","remote_port":1,"tp_size":1}`,
		`{"do_remote_prefill":true,"remote_block_ids":[[1,2],[3]],"remote_num_tokens":20,"remote_engine_id":"e","remote_request_id":"r","remote_host":"h","remote_port":1,"tp_size":2}`,
		`{"remote_block_ids":[[]]}`, `{"remote_block_ids":null}`, `{"remote_block_ids":[ [1] , []]}`, `{"remote_block_ids":[[1],2]}`, `{"remote_block_ids":"x"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var p Params
		if json.Unmarshal(b, &p) != nil {
			return
		}
		out, err := json.Marshal(p)
		require.NoError(t, err)
		var back Params
		require.NoError(t, json.Unmarshal(out, &back), "%s", out)
		require.Equal(t, p, back, "%s", out)
	})
}

// Params written by a grouped prefill read back as they were, and vLLM's
// one-group form (a list of one list) as a single-group list.
func TestParamsJSONGroups(t *testing.T) {
	var p Params
	require.NoError(t, json.Unmarshal([]byte(`{"do_remote_prefill":true,"remote_block_ids":[[3,4,5]],"remote_num_tokens":40,"tp_size":1}`), &p))
	require.Equal(t, []int{3, 4, 5}, p.RemoteBlockIDs, "one group's list reads back flat, as single-group Params write it")
	require.Nil(t, p.RemoteGroupBlockIDs)
	require.Equal(t, 40, p.NumTokens)
	require.NoError(t, json.Unmarshal([]byte(`{"remote_block_ids":[3,4]}`), &p))
	require.Equal(t, []int{3, 4}, p.RemoteBlockIDs)
	require.Nil(t, p.RemoteGroupBlockIDs, "a decode resets what an earlier value held")
	err := json.Unmarshal([]byte(`{"remote_block_ids":[[1],2]}`), &p)
	require.ErrorContains(t, err, "remote_block_ids")
	p = Params{NumTokens: 7}
	p.RemoteGroupBlockIDs = [][]int{{1}, {}}
	out, err := json.Marshal(p)
	require.NoError(t, err)
	require.Contains(t, string(out), `"remote_block_ids":[[1],[]]`)
	require.Contains(t, string(out), `"remote_num_tokens":7`)
}

// A key of the wrong type is named as the peer sent it, without the Go
// names of the structs Params decode through.
func TestParamsJSONTypeErrorNamesTheKey(t *testing.T) {
	var p Params
	err := json.Unmarshal([]byte(`{"remote_port":"5600"}`), &p)
	var te *json.UnmarshalTypeError
	require.ErrorAs(t, err, &te)
	require.Equal(t, "remote_port", te.Field)
	require.Equal(t, "json: cannot unmarshal string into Go struct field Params.remote_port of type int", err.Error())
}
