package pushconn

import "github.com/gonixl/gonixl/connector"

// modePush is the transfer_mode of push transfer params.
const modePush = "push"

// Params are what prefill returns for a finished request, with
// the JSON names of vLLM's kv_transfer_params. In push mode decode has
// registered before prefill finished, so they inform the proxy and decode
// of where the blocks come from rather than start anything.
type Params struct {
	connector.TransferParams
	PPSize int `json:"pp_size"`
	// NumTokens is the prompt length when RequestFinished was given it.
	NumTokens    int    `json:"num_tokens,omitempty"`
	TransferMode string `json:"transfer_mode"`
	TransferID   string `json:"transfer_id,omitempty"`
}

// prefill returns the prefill coordinates the params name, for
// Consumer.Register.
func (p Params) prefill() Prefill {
	return Prefill{EngineID: p.RemoteEngineID, Host: p.RemoteHost, Port: p.RemotePort, TPSize: p.TPSize, PPSize: p.PPSize}
}
