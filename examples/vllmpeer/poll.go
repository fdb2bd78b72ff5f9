package vllmpeer

import (
	"bytes"
	"strings"
	"time"
)

// poll reads every rank's notifications every millisecond (which also
// progresses agents that have no progress thread) and reaps leases.
func (p *Peer) poll() {
	defer p.polled.Done()
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		for r, a := range p.agents {
			ns, err := a.GetNotifs(nil)
			if err != nil || ns.Count() == 0 {
				continue
			}
			p.mu.Lock()
			for _, msgs := range ns {
				for _, m := range msgs {
					p.dispatch(r, m)
				}
			}
			p.signal()
			p.mu.Unlock()
		}
		p.mu.Lock()
		p.reap()
		p.mu.Unlock()
	}
}

// dispatch handles one notification on rank r; with mu held.
func (p *Peer) dispatch(r int, m []byte) {
	p.notifs[r] = append(p.notifs[r], string(m))
	switch {
	case bytes.HasPrefix(m, []byte(pushRegPrefix)):
		p.onPushReg(r, m)
	case strings.HasPrefix(string(m), heartbeatPrefix):
		p.onHeartbeat(string(m))
	default:
		p.onCompletion(r, string(m))
	}
}
