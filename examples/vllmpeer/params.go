package vllmpeer

import (
	"encoding/json"
	"fmt"
)

// Params are kv_transfer_params as vLLM's pull scheduler writes them when a
// prefill request finishes (request_finished), keys in vLLM's order: what
// the proxy passes to decode.
type Params struct {
	DoRemotePrefill bool `json:"do_remote_prefill"`
	DoRemoteDecode  bool `json:"do_remote_decode"`
	// RemoteBlockIDs holds one list of logical block ids per KV-cache group.
	RemoteBlockIDs  [][]int `json:"remote_block_ids"`
	RemoteEngineID  string  `json:"remote_engine_id"`
	RemoteRequestID string  `json:"remote_request_id"`
	RemoteHost      string  `json:"remote_host"`
	RemotePort      int     `json:"remote_port"`
	TPSize          int     `json:"tp_size"`
	DCPSize         int     `json:"dcp_size"`
	PPSize          int     `json:"pp_size"`
	RemoteNumTokens int     `json:"remote_num_tokens"`
	// RemoteBlocksExpiryTime is None from a vLLM prefill; a gonixl prefill
	// sends its lease's end on its side channel's clock.
	RemoteBlocksExpiryTime *float64 `json:"remote_blocks_expiry_time"`
	TransferMode           string   `json:"transfer_mode"`

	// FlatBlockIDs records that the params came with remote_block_ids as
	// one flat list, not a list per KV-cache group (not a vLLM key).
	FlatBlockIDs bool `json:"-"`
}

// JSON returns the params as vLLM writes them.
func (p Params) JSON() []byte {
	b, _ := json.Marshal(p) // only ints, strings, bools and lists
	return b
}

// ParseParams reads kv_transfer_params as a vLLM decode does: the keys it
// requires (remote_block_ids, remote_engine_id, remote_request_id,
// remote_host, remote_port, tp_size) and the optional ones (dcp_size and
// pp_size default to 1, remote_blocks_expiry_time to None).
// remote_block_ids may also be one flat list, as gonixl writes it; that is
// recorded in FlatBlockIDs.
func ParseParams(raw []byte) (Params, error) {
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(raw, &keys); err != nil {
		return Params{}, fmt.Errorf("vllmpeer: kv_transfer_params: %w", err)
	}
	for _, k := range []string{"remote_block_ids", "remote_engine_id", "remote_request_id", "remote_host", "remote_port", "tp_size"} {
		if _, ok := keys[k]; !ok {
			return Params{}, fmt.Errorf("vllmpeer: kv_transfer_params has no %s", k)
		}
	}
	var p Params
	blocks := keys["remote_block_ids"]
	delete(keys, "remote_block_ids")
	rest, _ := json.Marshal(keys)
	if err := json.Unmarshal(rest, &p); err != nil {
		return Params{}, fmt.Errorf("vllmpeer: kv_transfer_params: %w", err)
	}
	if err := json.Unmarshal(blocks, &p.RemoteBlockIDs); err != nil {
		var flat []int
		if json.Unmarshal(blocks, &flat) != nil {
			return Params{}, fmt.Errorf("vllmpeer: kv_transfer_params.remote_block_ids is %s, want a list of block-id lists (one per KV-cache group)", blocks)
		}
		p.RemoteBlockIDs, p.FlatBlockIDs = [][]int{flat}, true
	}
	if p.DCPSize == 0 {
		p.DCPSize = 1
	}
	if p.PPSize == 0 {
		p.PPSize = 1
	}
	switch {
	case p.TPSize < 1:
		return Params{}, fmt.Errorf("vllmpeer: kv_transfer_params.tp_size is %d, want >= 1", p.TPSize)
	case p.RemotePort < 1 || p.RemotePort > 65535:
		return Params{}, fmt.Errorf("vllmpeer: kv_transfer_params.remote_port is %d, want 1..65535", p.RemotePort)
	case p.DCPSize != 1 || p.PPSize != 1:
		return Params{}, fmt.Errorf("vllmpeer: kv_transfer_params has dcp_size %d and pp_size %d; the peer plays 1 and 1", p.DCPSize, p.PPSize)
	case len(p.RemoteBlockIDs) > 1:
		return Params{}, fmt.Errorf("vllmpeer: kv_transfer_params.remote_block_ids has %d KV-cache groups; the peer plays one", len(p.RemoteBlockIDs))
	}
	return p, nil
}

// blocks returns the one group's block ids.
func (p Params) blocks() []int {
	if len(p.RemoteBlockIDs) == 0 {
		return nil
	}
	return p.RemoteBlockIDs[0]
}
