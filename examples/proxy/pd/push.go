package pd

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

type decodeAnswer struct {
	resp    *http.Response
	err     error
	takenIn *atomic.Bool // decode said it took the request in (sendDecode)
}

func (a decodeAnswer) close() {
	if a.resp != nil {
		a.resp.Body.Close()
	}
}

// servePush chooses the decode engine and a prefill engine, then sends both legs at once:
// decode registers its blocks with the prefill engine named in its kv_transfer_params and
// the prefill engine writes into them when it is done. Decode's answer is streamed back as
// soon as it comes; a prefill failure cancels the decode leg. One retry is allowed per
// request: the pair with another prefill engine when prefill fails before decode answered or
// decode answers a 5xx other than 503 before prefill did, or with another decode engine when
// decode did not take the request in (no connection, or a 503 before prefill answered: see
// failover.go). Both legs post to path: a chat request goes to both engines
// whole, and each renders the same template into the same tokens.
func (p *Proxy) servePush(w http.ResponseWriter, c *completion, path string) {
	var triedD []*engine
	var last *legError
	for {
		pools := p.pools()
		de, releaseD := p.pick(pools.decode, &p.rrDecode, p.cfg.Policy, func(e *engine) bool { return p.hasPartner(pools.prefill, e) }, triedD...)
		if de == nil {
			if last == nil {
				last = p.noPair(pools.decode, pools.prefill, roleDecode)
			}
			p.fail(w, c, last)
			return
		}
		if last != nil {
			p.countRetry(last.failover)
			c.log.Info("decode did not take the request in, retrying the pair on another decode engine", zap.String("engine", de.url),
				zap.String("reason", last.failover), zap.String("error", last.msg))
		}
		unreachable := p.pushPair(w, c, path, de, last == nil)
		releaseD()
		if unreachable == nil {
			return
		}
		last, triedD = unreachable, append(triedD, de)
	}
}

// pushPair serves c with decode engine de and a prefill engine (retried once on another
// one if mayRetry). It returns decode's error, without answering the client, when decode
// did not take the request in and mayRetry (its failover says why); nil once the client has
// its answer.
func (p *Proxy) pushPair(w http.ResponseWriter, c *completion, path string, de *engine, mayRetry bool) *legError {
	var tried []*engine
	var last *legError
	reason := reasonPrefillFailed // of the retry on another prefill engine
	attempts := 1
	if mayRetry {
		attempts = 2
	}
	for attempt := 0; attempt < attempts; attempt++ {
		pe, releaseP := p.pick(p.pools().prefill, &p.rrPrefill, p.cfg.Policy, func(e *engine) bool { return compatible(de, e) }, tried...)
		if pe == nil {
			break
		}
		if attempt > 0 {
			p.countRetry(reason)
			c.log.Info("the pair failed before decode streamed, retrying it on another prefill engine",
				zap.String("engine", pe.url), zap.String("error", last.msg))
		}
		info := pe.kvInfo() // not nil: push keeps prefill engines without it out of rotation
		tid := newTransferID()
		decodeBody := c.body(map[string]any{
			"do_remote_prefill": true,
			"remote_engine_id":  info.EngineID,
			"remote_host":       info.SideChannelHost,
			"remote_port":       info.SideChannelPort,
			"tp_size":           info.TPSize,
			"pp_size":           info.PPSize,
			"transfer_mode":     "push",
			"transfer_id":       tid,
		}, false)
		prefillBody := c.body(map[string]any{
			"do_remote_decode": true,
			"transfer_mode":    "push",
			"transfer_id":      tid,
		}, true)
		log := c.log.With(zap.String("prefill", pe.url), zap.String("decode", de.url), zap.String("transfer_id", tid))

		dtctx, dtcancel := context.WithTimeout(c.r.Context(), p.cfg.RequestTimeout)
		dctx, dcancelCause := context.WithCancelCause(dtctx)
		dcancel := func() { dcancelCause(nil); dtcancel() }
		dch := make(chan decodeAnswer, 1)
		sent := time.Now()
		go func() {
			resp, takenIn, err := p.sendDecode(dctx, c, de, path, decodeBody)
			dch <- decodeAnswer{resp, err, takenIn}
		}()
		pctx, pcancel := context.WithCancel(c.r.Context())
		pch := make(chan *legError, 1)
		go func() {
			defer releaseP()
			_, le := p.prefillLeg(pctx, c, pe, path, prefillBody)
			pch <- le
		}()

		select {
		case le := <-pch:
			if le == nil {
				log.Debug("prefill done")
				da := <-dch
				if reason := p.neverTakenIn(c, de, da); mayRetry && reason != "" {
					le := p.transportError(c, dctx, de, da.err) // before dcancel: it reads dctx
					le.failover = reason
					dcancel()
					pcancel()
					p.met.leg("decode", sent, false)
					return le // prefill's hold ends with its lease
				}
				p.finishDecode(w, c, dctx, de, pe, da, sent)
				dcancel()
				pcancel()
				return nil
			}
			// Prefill failed before decode answered: decode would wait for blocks that never
			// come. Cancel it (the engine aborts the request and frees its blocks).
			dcancel()
			(<-dch).close()
			pcancel()
			last, reason = le, reasonPrefillFailed
			if le.retryable {
				tried = append(tried, pe)
				continue
			}
			p.fail(w, c, le)
			return nil

		case da := <-dch:
			if mayRetry && da.err == nil && decodeRefused(da.resp.StatusCode) && c.r.Context().Err() == nil {
				// Decode did not take the request in, before prefill answered: it registered no
				// blocks, so prefill has nothing to write. The pair again, on another decode engine.
				le := decodeStatusError(de, pe, da.resp)
				le.failover = reasonDecodeRefused
				pcancel()
				<-pch
				dcancel()
				p.met.leg("decode", sent, false)
				return le
			}
			if da.err == nil && da.resp.StatusCode >= 500 && attempt+1 < attempts {
				// Decode failed before prefill answered, e.g. its handshake with a prefill engine
				// that just died: the pair again with another prefill engine.
				le := decodeStatusError(de, pe, da.resp)
				pcancel()
				<-pch
				dcancel()
				p.met.leg("decode", sent, false)
				last, tried, reason = le, append(tried, pe), reasonDecodeKVFailed
				continue
			}
			if da.err != nil || da.resp.StatusCode < 200 || da.resp.StatusCode > 299 {
				pcancel()
				<-pch
				if reason := p.neverTakenIn(c, de, da); mayRetry && reason != "" {
					le := p.transportError(c, dctx, de, da.err) // before dcancel: it reads dctx
					le.failover = reason
					dcancel()
					p.met.leg("decode", sent, false)
					return le
				}
				p.finishDecode(w, c, dctx, de, pe, da, sent)
				dcancel()
				return nil
			}
			// Decode answered first: stream it, and cut it if prefill fails meanwhile.
			watched := make(chan struct{})
			go func() {
				defer close(watched)
				if le := <-pch; le != nil && !le.cancelled {
					log.Warn("prefill failed while decode was answering; cancelling decode", zap.String("error", le.msg))
					dcancelCause(fmt.Errorf("prefill engine %s failed: %s", pe.url, le.msg))
				}
			}()
			p.finishDecode(w, c, dctx, de, pe, da, sent)
			<-watched // prefill ends too: it wrote the blocks, or the client went away
			dcancel()
			pcancel()
			return nil
		}
	}
	if last == nil {
		last = errNoEngine(rolePrefill)
	}
	p.fail(w, c, last)
	return nil
}

// neverTakenIn says why the decode leg may go to another decode engine while the client
// is still there: it failed to connect (reasonDecodeUnreachable: the request never reached
// the engine) or its connection closed before the engine said it took the request in
// (reasonDecodeClosed: it registered no blocks, so nothing is written to them); "" when
// neither.
func (p *Proxy) neverTakenIn(c *completion, de *engine, da decodeAnswer) string {
	switch {
	case da.err == nil || c.r.Context().Err() != nil:
		return ""
	case isDialError(da.err):
		return reasonDecodeUnreachable
	case closedBeforeTakenIn(de, da.takenIn, da.err):
		return reasonDecodeClosed
	}
	return ""
}

// finishDecode answers the client from decode's answer (its leg sent at sent, with KV from
// prefill engine pe): its stream, or an error.
func (p *Proxy) finishDecode(w http.ResponseWriter, c *completion, ctx context.Context, de, pe *engine, da decodeAnswer, sent time.Time) {
	ok := false
	defer func() { p.met.leg("decode", sent, ok) }()
	if da.err != nil {
		p.fail(w, c, p.transportError(c, ctx, de, da.err))
		return
	}
	if da.resp.StatusCode < 200 || da.resp.StatusCode > 299 {
		p.fail(w, c, decodeStatusError(de, pe, da.resp))
		return
	}
	ok = p.relay(w, c, ctx, de, da.resp)
}
