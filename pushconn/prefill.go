package pushconn

import "fmt"

// Prefill names the prefill engine a request comes from, as the proxy
// gives it to decode before prefill runs.
type Prefill struct {
	EngineID string
	Host     string
	Port     int
	TPSize   int
	PPSize   int
}

func (p Prefill) validate() error {
	switch {
	case p.EngineID == "":
		return invalidf("Prefill.EngineID is empty")
	case p.Host == "":
		return invalidf("Prefill.Host is empty")
	case p.Port < 1 || p.Port > 65535:
		return invalidf("Prefill.Port is %d, want 1..65535", p.Port)
	case p.TPSize < 1:
		return invalidf("Prefill.TPSize is %d, want >= 1", p.TPSize)
	case p.PPSize < 1:
		return invalidf("Prefill.PPSize is %d, want >= 1", p.PPSize)
	}
	return nil
}

// peerKey names prefill engine p among a decode rank's peers.
func peerKey(p Prefill) string { return fmt.Sprintf("%s@%s:%d", p.EngineID, p.Host, p.Port) }
