package pullconn

import "time"

// advert is what every rank of a prefill engine puts in its Params for
// one request: the first rank to finish the request fixes it.
type advert struct {
	deadline time.Time
	// mono is the deadline on the engine's side-channel clock, vLLM's
	// clock for remote_blocks_expiry_time (the first rank's, like the
	// deadline, so that every rank returns the same Params).
	mono float64
	// nonce tells this hold of the id from any other, in its key, even
	// if a clock stepped back gave a later hold the same deadline.
	nonce uint64
	// incarnation is the engine's incarnation when the first rank
	// finished the request (Params.RemoteIncarnation).
	incarnation uint64
	// took holds the TP ranks that have finished the request with this
	// advert.
	took map[int]bool
}

// adverts is an engine's table of adverts, per request id finishing on
// its prefill ranks: pure state, which the engine guards with its lock
// and the simulation drives as it is.
type adverts struct {
	byID map[string]*advert
	// limit is how many unfinished adverts the table keeps before it drops
	// those whose deadline passed.
	limit int
	// legacy (tests only) restores the rules of b6a750d, to show that the
	// simulation finds their holes: a rank makes a new advert once the
	// deadline of the one it would take passed on its clock (not when it
	// took that one already), and a hold's end drops nothing.
	legacy bool
}

// take returns the advert of request id for TP rank rank of an engine of
// tp ranks, which holds until own by its clock now. The first rank to
// finish a request fixes its advert (fresh(own)); every other rank takes
// the same, however late it comes (a scheduling delay, a step of its
// clock, past the deadline or not), so every rank returns the same Params.
// A rank that finishes an id whose advert it already took finishes a new
// request of the id (a retry): it gets a new advert, deadline and nonce.
// So does every rank once a rank's hold of the id ended (drop).
func (t *adverts) take(id string, rank, tp int, now, own time.Time, fresh func(own time.Time) advert) advert {
	if t.byID == nil {
		t.byID = map[string]*advert{}
	}
	a, ok := t.byID[id]
	stale := ok && a.took[rank]
	if t.legacy {
		stale = ok && !now.Before(a.deadline)
	}
	if !ok || stale {
		if len(t.byID) > t.limit {
			// Bounded: adverts some rank never took (its RequestFinished
			// failed or never came) and whose deadline passed go first.
			for k, v := range t.byID {
				if !now.Before(v.deadline) {
					delete(t.byID, k)
				}
			}
		}
		n := fresh(own)
		n.took = map[int]bool{}
		a = &n
		t.byID[id] = a
	}
	a.took[rank] = true
	if len(a.took) >= tp {
		delete(t.byID, id)
	}
	return *a
}

// drop forgets the adverts of ids whose hold ended on a rank: a later
// RequestFinished of one of them is a new request of the id (a retry), not
// a late rank of this one, and must get a deadline and a nonce, hence a
// hold key, of its own. A rank that finishes the old request late then
// advertises a hold the Params do not name, and decode's pin is refused:
// it costs that load, never a byte.
func (t *adverts) drop(ids []string) {
	if t.legacy {
		return
	}
	for _, id := range ids {
		delete(t.byID, id)
	}
}
