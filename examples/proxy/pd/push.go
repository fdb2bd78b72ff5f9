package pd

import (
	"context"
	"fmt"
	"net/http"

	"go.uber.org/zap"
)

type decodeAnswer struct {
	resp *http.Response
	err  error
}

func (a decodeAnswer) close() {
	if a.resp != nil {
		a.resp.Body.Close()
	}
}

// servePush chooses the decode engine and a prefill engine, then sends both legs at once:
// decode registers its blocks with the prefill engine named in its kv_transfer_params and
// the prefill engine writes into them when it is done. Decode's answer is streamed back as
// soon as it comes; a prefill failure cancels the decode leg.
func (p *Proxy) servePush(w http.ResponseWriter, c *completion) {
	pools := p.pools()
	de, releaseD := p.pick(pools.decode, &p.rrDecode, p.cfg.Policy, func(e *engine) bool { return p.hasPartner(pools.prefill, e) })
	if de == nil {
		p.fail(w, c, p.noPair(pools.decode, pools.prefill, roleDecode))
		return
	}
	defer releaseD()

	var tried []*engine
	var last *legError
	for attempt := 0; attempt < 2; attempt++ {
		pe, releaseP := p.pick(p.pools().prefill, &p.rrPrefill, p.cfg.Policy, func(e *engine) bool { return compatible(de, e) }, tried...)
		if pe == nil {
			break
		}
		if attempt > 0 {
			p.retried.Add(1)
			c.log.Info("prefill failed before decode answered, retrying the pair on another prefill engine",
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
		go func() {
			resp, err := p.send(dctx, c, de, decodeBody)
			dch <- decodeAnswer{resp, err}
		}()
		pctx, pcancel := context.WithCancel(c.r.Context())
		pch := make(chan *legError, 1)
		go func() {
			defer releaseP()
			_, le := p.prefillLeg(pctx, c, pe, prefillBody)
			pch <- le
		}()

		select {
		case le := <-pch:
			if le == nil {
				log.Debug("prefill done")
				p.finishDecode(w, c, dctx, de, <-dch)
				dcancel()
				pcancel()
				return
			}
			// Prefill failed before decode answered: decode would wait for blocks that never
			// come. Cancel it (the engine aborts the request and frees its blocks).
			dcancel()
			(<-dch).close()
			pcancel()
			last = le
			if le.retryable {
				tried = append(tried, pe)
				continue
			}
			p.fail(w, c, le)
			return

		case da := <-dch:
			if da.err != nil || da.resp.StatusCode < 200 || da.resp.StatusCode > 299 {
				pcancel()
				<-pch
				p.finishDecode(w, c, dctx, de, da)
				dcancel()
				return
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
			p.finishDecode(w, c, dctx, de, da)
			<-watched // prefill ends too: it wrote the blocks, or the client went away
			dcancel()
			pcancel()
			return
		}
	}
	if last == nil {
		last = errNoEngine(rolePrefill)
	}
	p.fail(w, c, last)
}

// finishDecode answers the client from decode's answer: its stream, or an error.
func (p *Proxy) finishDecode(w http.ResponseWriter, c *completion, ctx context.Context, de *engine, da decodeAnswer) {
	if da.err != nil {
		p.fail(w, c, p.transportError(c, ctx, de, da.err))
		return
	}
	if da.resp.StatusCode < 200 || da.resp.StatusCode > 299 {
		p.fail(w, c, statusError(de, da.resp))
		return
	}
	p.relay(w, c, ctx, de, da.resp)
}
