package connector

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
