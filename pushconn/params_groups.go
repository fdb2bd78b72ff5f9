package pushconn

import (
	"encoding/json"

	"github.com/gonixl/gonixl/internal/groupids"
)

// paramsJSON is Params without its methods, so that MarshalJSON and
// UnmarshalJSON can use the default encoding for every other key.
type paramsJSON Params

// MarshalJSON writes Params with vLLM's keys. Grouped Params
// (RequestFinishedGroups) write remote_block_ids as vLLM does, one list
// per KV-cache group, and the token count the lists cover as vLLM's
// remote_num_tokens beside num_tokens; single-group Params write the flat
// list they always did.
func (p Params) MarshalJSON() ([]byte, error) {
	if p.RemoteGroupBlockIDs == nil {
		return json.Marshal(paramsJSON(p))
	}
	return json.Marshal(struct {
		paramsJSON
		RemoteBlockIDs  [][]int `json:"remote_block_ids"`
		RemoteNumTokens int     `json:"remote_num_tokens"`
	}{paramsJSON(p), p.RemoteGroupBlockIDs, p.NumTokens})
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
		return err
	}
	flat, groups, err := groupids.Decode(aux.RemoteBlockIDs)
	if err != nil {
		return err
	}
	p.RemoteBlockIDs, p.RemoteGroupBlockIDs = flat, groups
	if p.NumTokens == 0 && aux.RemoteNumTokens != nil {
		p.NumTokens = *aux.RemoteNumTokens
	}
	return nil
}
