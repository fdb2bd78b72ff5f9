package pullconn

import (
	"encoding/json"

	"github.com/gonixl/gonixl/internal/groupids"
)

// paramsJSON is Params without its methods, so that MarshalJSON and
// UnmarshalJSON can use the default encoding for every other key.
type paramsJSON Params

// MarshalJSON writes Params with vLLM's keys, as vLLM writes them:
// remote_block_ids is one list per KV-cache group (a single-group
// request's ids as a list of one list, RemoteGroupBlockIDs for a grouped
// one), and the token count the lists cover is vLLM's remote_num_tokens
// beside num_tokens (when known). A vLLM decode reads these Params as its
// own prefill's; a gonixl decode reads either form.
func (p Params) MarshalJSON() ([]byte, error) {
	// The keys at this depth hide TransferParams' flat remote_block_ids.
	return json.Marshal(struct {
		paramsJSON
		RemoteBlockIDs  [][]int `json:"remote_block_ids"`
		RemoteNumTokens int     `json:"remote_num_tokens,omitempty"`
	}{paramsJSON(p), groupids.OnWire(p.RemoteBlockIDs, p.RemoteGroupBlockIDs), p.NumTokens})
}

// UnmarshalJSON reads what MarshalJSON writes, and vLLM's Params:
// remote_block_ids as a flat list sets RemoteBlockIDs, as a list of lists
// RemoteGroupBlockIDs; remote_num_tokens sets NumTokens when num_tokens
// is absent.
func (p *Params) UnmarshalJSON(b []byte) error {
	var aux struct {
		*paramsJSON
		RemoteBlockIDs  json.RawMessage `json:"remote_block_ids"`
		RemoteNumTokens *int            `json:"remote_num_tokens"`
	}
	*p = Params{}
	aux.paramsJSON = (*paramsJSON)(p)
	if err := json.Unmarshal(b, &aux); err != nil {
		return groupids.KeyPath(err)
	}
	return groupids.FromWire(aux.RemoteBlockIDs, aux.RemoteNumTokens, &p.RemoteBlockIDs, &p.RemoteGroupBlockIDs, &p.NumTokens)
}
