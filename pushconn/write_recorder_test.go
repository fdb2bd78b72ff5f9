package pushconn

import (
	"slices"
	"strings"
	"sync"

	"github.com/gonixl/gonixl/nixl"
)

// writeRecorder records the WRITEs prefill ranks' agents create, in order:
// which agent, how many descriptors, and the notification.
type writeRecorder struct {
	mu     sync.Mutex
	writes []recordedWrite
}

type recordedWrite struct {
	agent string
	to    string
	descs int
	notif []byte // nil: none
	// remote is the WRITE's destination list.
	remote []nixl.Desc
}

type recordingAgent struct {
	nixl.Agent
	name string
	rec  *writeRecorder
}

func (a recordingAgent) CreateXferReq(op nixl.XferOp, local, remote nixl.XferList, to string, opts *nixl.Options) (nixl.XferHandle, error) {
	w := recordedWrite{agent: a.name, to: to, descs: len(local.Descs), remote: slices.Clone(remote.Descs)}
	if opts != nil {
		w.notif = slices.Clone(opts.Notif) // the caller may reuse its bytes
	}
	a.rec.mu.Lock()
	a.rec.writes = append(a.rec.writes, w)
	a.rec.mu.Unlock()
	return a.Agent.CreateXferReq(op, local, remote, to, opts)
}

// wrap is a rigConfig.wrap that records every prefill agent's WRITEs.
func (r *writeRecorder) wrap(name string, a nixl.Agent) nixl.Agent {
	if !strings.HasPrefix(name, "prefill-") {
		return a
	}
	return recordingAgent{Agent: a, name: name, rec: r}
}

// descs returns the descriptor counts of agent's WRITEs, in order.
func (r *writeRecorder) descs(agent string) []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []int
	for _, w := range r.writes {
		if w.agent == agent {
			out = append(out, w.descs)
		}
	}
	return out
}

// notifs returns the recorded notifications that start with prefix.
func (r *writeRecorder) notifs(prefix string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, w := range r.writes {
		if w.notif != nil && strings.HasPrefix(string(w.notif), prefix) {
			out = append(out, string(w.notif))
		}
	}
	return out
}
