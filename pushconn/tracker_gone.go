package pushconn

import (
	"slices"
	"strings"

	"github.com/gonixl/gonixl/internal/handshake"
)

// goneSettled is a request that a dead prefill incarnation settled: it
// failed (live) or its blocks went back (draining, released).
type goneSettled struct {
	id       string
	agents   []string // the dead agents it waited for
	released bool     // its result is out: no prefill rank can write any more
}

// prefillGone records that the agents in gone, of the prefill incarnation
// decode knew as payload via, are dead and their metadata unloaded: none
// of them can write any more. Every request whose registration went out
// under via and still waits for one of them settles that rank
// (srcGone): a live one ends with err (and drains while other ranks may
// still write), a draining one is released once no rank is left. It
// returns the requests it settled, in id order.
func (t *tracker) prefillGone(now instant, via *handshake.Payload, gone map[string]bool, err error) []goneSettled {
	var out []goneSettled
	mark := func(r *decodeReq) []string {
		if r.via != via {
			return nil
		}
		var hit []string
		for a, st := range r.sources {
			if st == srcWaiting && gone[a] {
				r.sources[a] = srcGone
				hit = append(hit, a)
			}
		}
		slices.Sort(hit)
		return hit
	}
	for _, id := range sortedIDs(t.reqs) {
		r := t.reqs[id]
		if hit := mark(r); len(hit) > 0 {
			t.end(now, r, err)
			_, draining := t.draining[id]
			out = append(out, goneSettled{id: id, agents: hit, released: !draining})
		}
	}
	for _, id := range sortedIDs(t.draining) {
		r := t.draining[id]
		hit := mark(r)
		if len(hit) == 0 {
			continue
		}
		if len(r.waiting()) > 0 {
			out = append(out, goneSettled{id: id, agents: hit})
			continue
		}
		t.release(now, r)
		out = append(out, goneSettled{id: id, agents: hit, released: true})
	}
	slices.SortFunc(out, func(a, b goneSettled) int { return strings.Compare(a.id, b.id) })
	return out
}

func sortedIDs(m map[string]*decodeReq) []string {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
