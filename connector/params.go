package connector

import (
	"encoding/json"

	"github.com/gonixl/gonixl/internal/groupids"
)

// TransferParams are the keys of vLLM's kv_transfer_params that the Params
// of both connectors carry, with vLLM's JSON names: what prefill tells
// decode (through the proxy) about where a request's blocks are. pullconn
// and pushconn embed it in their Params beside their own keys, so the JSON
// is one flat object, as vLLM's.
type TransferParams struct {
	DoRemotePrefill bool   `json:"do_remote_prefill"`
	DoRemoteDecode  bool   `json:"do_remote_decode"`
	RemoteBlockIDs  []int  `json:"remote_block_ids"`
	RemoteEngineID  string `json:"remote_engine_id"`
	RemoteRequestID string `json:"remote_request_id"`
	RemoteHost      string `json:"remote_host"`
	RemotePort      int    `json:"remote_port"`
	// TPSize is the prefill engine's tensor-parallel size.
	TPSize int `json:"tp_size"`
	// RemoteGroupBlockIDs are the prefill rank's block ids per KV-cache
	// group, for a grouped layout (RequestFinishedGroups); RemoteBlockIDs
	// is then nil. The connectors' Params write them as vLLM does, a list
	// of lists under remote_block_ids, and read either form back.
	RemoteGroupBlockIDs [][]int `json:"-"`
}

// Params are a request's kv_transfer_params, the JSON object vLLM's
// connectors put in an answer and a request: Producer.RequestFinished
// returns them, the engine answers the prefill leg with them, the proxy
// carries them unchanged into the decode leg, and Consumer.Load reads
// them. Both connectors write and read this one type, so neither the
// engine nor the proxy needs to know which connector runs. The keys every
// connector knows are fields; every other key (pull's hold deadline and
// nonce, its staging slot, a vLLM peer's own keys) is kept in Extra as it
// came, and written back as it was. pullconn.Params and pushconn.Params are
// the connectors' typed views of the same JSON.
type Params struct {
	TransferParams
	// PPSize is the prefill engine's pipeline-parallel size.
	PPSize int `json:"pp_size,omitempty"`
	// NumTokens is the prompt length the block lists cover (also written
	// as vLLM's remote_num_tokens).
	NumTokens int `json:"num_tokens,omitempty"`
	// TransferMode is "pull" or "push": a decode engine of the other
	// connector refuses the Params.
	TransferMode string `json:"transfer_mode,omitempty"`
	// TransferID is the router-assigned id of Request.TransferID.
	TransferID string `json:"transfer_id,omitempty"`
	// Extra are the object's other keys (a connector's own, a peer's
	// unknown ones), each with its JSON value.
	Extra map[string]json.RawMessage `json:"-"`
}

// paramsKeys are the keys Params has fields for.
var paramsKeys = []string{"do_remote_prefill", "do_remote_decode", "remote_block_ids", "remote_engine_id",
	"remote_request_id", "remote_host", "remote_port", "tp_size", "pp_size", "num_tokens", "remote_num_tokens",
	"transfer_mode", "transfer_id"}

type paramsJSON Params

// MarshalJSON writes p as one JSON object, as vLLM does: remote_block_ids
// as one list per KV-cache group, remote_num_tokens beside num_tokens, and
// the Extra keys beside the fields' (a field wins over an Extra key of its
// name).
func (p Params) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(struct {
		paramsJSON
		RemoteBlockIDs  [][]int `json:"remote_block_ids"`
		RemoteNumTokens int     `json:"remote_num_tokens,omitempty"`
	}{paramsJSON(p), groupids.OnWire(p.RemoteBlockIDs, p.RemoteGroupBlockIDs), p.NumTokens})
	if err != nil || len(p.Extra) == 0 {
		return b, err
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(b, &all); err != nil {
		return nil, err
	}
	for k, v := range p.Extra {
		if _, field := all[k]; !field {
			all[k] = v
		}
	}
	return json.Marshal(all)
}

// UnmarshalJSON reads a kv_transfer_params object: the keys Params has
// fields for into them (remote_block_ids as a flat list or as one list per
// group), every other key into Extra.
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
	if err := groupids.FromWire(aux.RemoteBlockIDs, aux.RemoteNumTokens, &p.RemoteBlockIDs, &p.RemoteGroupBlockIDs, &p.NumTokens); err != nil {
		return err
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(b, &all); err != nil {
		return err
	}
	for _, k := range paramsKeys {
		delete(all, k)
	}
	if len(all) > 0 {
		p.Extra = all
	}
	return nil
}
