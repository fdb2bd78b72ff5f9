package pushconn

// ModePush is the transfer_mode of push transfer params.
const ModePush = "push"

// Params are what prefill returns for a finished request, with
// the JSON names of vLLM's kv_transfer_params. In push mode decode has
// registered before prefill finished, so they inform the proxy and decode
// of where the blocks come from rather than start anything.
type Params struct {
	DoRemotePrefill bool   `json:"do_remote_prefill"`
	DoRemoteDecode  bool   `json:"do_remote_decode"`
	RemoteBlockIDs  []int  `json:"remote_block_ids"`
	RemoteEngineID  string `json:"remote_engine_id"`
	RemoteRequestID string `json:"remote_request_id"`
	RemoteHost      string `json:"remote_host"`
	RemotePort      int    `json:"remote_port"`
	TPSize          int    `json:"tp_size"`
	PPSize          int    `json:"pp_size"`
	// NumTokens is the prompt length when RequestFinished was given it.
	NumTokens    int    `json:"num_tokens,omitempty"`
	TransferMode string `json:"transfer_mode"`
	TransferID   string `json:"transfer_id,omitempty"`
}

// Prefill returns the prefill coordinates the params name, for
// Consumer.Register.
func (p Params) Prefill() Prefill {
	return Prefill{EngineID: p.RemoteEngineID, Host: p.RemoteHost, Port: p.RemotePort, TPSize: p.TPSize, PPSize: p.PPSize}
}
