package pushconn

import (
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/gonixl/gonixl/internal/notif"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/pushconn/internal/pushwire"
)

// campaignNet is the campaign's share of a network that duplicates
// messages, on top of the fabric's faults: it keeps a copy of every WRITE
// notification (completion) a prefill agent sends, so the campaign can
// deliver one again, late, when the request id is registered again; and
// it sends a fraction of decode's PUSH_REGs a second time some 30 ms
// later. The resends wait in a queue that the campaign's loop delivers
// (deliver), so nothing is left running when the campaign ends.
type campaignNet struct {
	mu sync.Mutex
	// rng draws the resends. The agents call in from their rank's
	// goroutines, so it is the net's own, not the campaign's.
	rng         *rand.Rand
	regResend   float64 // share of PUSH_REGs sent twice
	completions map[string][]sentCompletion
	resends     []netResend
	regCopies   int // PUSH_REGs delivered twice
}

// sentCompletion is one WRITE notification, as a prefill agent sent it.
type sentCompletion struct {
	from nixl.Agent // the agent under the wrapper: a copy bypasses the recording
	to   string
	msg  []byte
}

type netResend struct {
	due  time.Time
	from nixl.Agent
	to   string
	msg  []byte
}

func newCampaignNet(seed uint64, regResend float64) *campaignNet {
	return &campaignNet{rng: rand.New(rand.NewPCG(seed, 31)), regResend: regResend, completions: map[string][]sentCompletion{}}
}

// wrap is the rig's agent hook: prefill agents record their completions,
// decode agents resend some of their registrations.
func (n *campaignNet) wrap(name string, a nixl.Agent) nixl.Agent {
	if strings.HasPrefix(name, "prefill") {
		return &netPrefillAgent{Agent: a, net: n}
	}
	return &netDecodeAgent{Agent: a, net: n}
}

type netPrefillAgent struct {
	nixl.Agent
	net *campaignNet
}

func (a *netPrefillAgent) CreateXferReq(op nixl.XferOp, local, remote nixl.XferList, agent string, opts *nixl.Options) (nixl.XferHandle, error) {
	if opts != nil && len(opts.Notif) > 0 {
		if id, ok := completionID(opts.Notif); ok {
			a.net.mu.Lock()
			a.net.completions[id] = append(a.net.completions[id], sentCompletion{from: a.Agent, to: agent, msg: append([]byte(nil), opts.Notif...)})
			a.net.mu.Unlock()
		}
	}
	return a.Agent.CreateXferReq(op, local, remote, agent, opts)
}

// completionID reads the decode request id of a plain or staged
// completion, or of a staged part's notification.
func completionID(msg []byte) (string, bool) {
	s := string(msg)
	switch {
	case strings.HasPrefix(s, pushwire.StagedPartPrefix):
		c, err := pushwire.DecodeStagedPart(msg)
		return c.ID, err == nil
	case strings.HasPrefix(s, pushwire.StagedChunkPrefix):
		c, err := pushwire.DecodeStagedChunk(msg)
		return c.ID, err == nil
	case strings.HasPrefix(s, pushwire.StagedPrefix):
		c, err := pushwire.DecodeStaged(msg)
		return c.ID, err == nil
	}
	c, err := notif.DecodeSeqCompletion(msg)
	return c.ID, err == nil
}

type netDecodeAgent struct {
	nixl.Agent
	net *campaignNet
}

func (a *netDecodeAgent) GenNotif(remote string, msg []byte, opts *nixl.Options) error {
	if strings.HasPrefix(string(msg), pushwire.RegPrefix) {
		n := a.net
		n.mu.Lock()
		if n.rng.Float64() < n.regResend {
			due := time.Now().Add(25*time.Millisecond + time.Duration(n.rng.IntN(10_000))*time.Microsecond)
			n.resends = append(n.resends, netResend{due: due, from: a.Agent, to: remote, msg: append([]byte(nil), msg...)})
		}
		n.mu.Unlock()
	}
	return a.Agent.GenNotif(remote, msg, opts)
}

// recorded returns how many completions of decode request id prefill has
// sent so far.
func (n *campaignNet) recorded(id string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.completions[id])
}

// resendCompletion delivers once more completion i of decode request id,
// as the prefill agent sent it; the fabric may drop or delay it like any
// notification.
func (n *campaignNet) resendCompletion(id string, i int) {
	n.mu.Lock()
	c := n.completions[id][i]
	n.mu.Unlock()
	_ = c.from.GenNotif(c.to, c.msg, nil) // a disconnected agent: lost, as on a network
}

// deliver sends the registrations due again by now.
func (n *campaignNet) deliver(now time.Time) {
	n.mu.Lock()
	var due []netResend
	kept := n.resends[:0]
	for _, r := range n.resends {
		if now.Before(r.due) {
			kept = append(kept, r)
		} else {
			due = append(due, r)
		}
	}
	n.resends = kept
	n.regCopies += len(due)
	n.mu.Unlock()
	for _, r := range due {
		_ = r.from.GenNotif(r.to, r.msg, nil)
	}
}
