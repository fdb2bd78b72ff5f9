//go:build nixl && cuda

package gpue2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/gonixl/gonixl/nixl"
)

// pair is an initiator endpoint on device 0 and a target, each with the
// other's metadata loaded.
type pair struct {
	init *endpoint
	tgt  target
	// where names the arrangement for logs and benchmark names.
	where string
}

// newPair sets up an initiator on device 0 and a target of the same size on
// device tgtDev, in this process (local) or in a peer process.
func newPair(tb testing.TB, local bool, tgtDev int, size uint64) (*pair, error) {
	kind := "2proc"
	if local {
		kind = "1proc"
	}
	where := fmt.Sprintf("%s-gpu0-gpu%d", kind, tgtDev)
	init, err := newEndpoint(tb, "init-"+where, 0, size)
	if err != nil {
		return nil, err
	}
	p := &pair{init: init, where: where}
	initMD, err := init.agent.LocalMD()
	if err != nil {
		init.close()
		return nil, err
	}
	if local {
		e, err := newEndpoint(tb, "target-"+where, tgtDev, size)
		if err != nil {
			init.close()
			return nil, err
		}
		if _, err := e.agent.LoadRemoteMD(initMD); err != nil {
			e.close()
			init.close()
			return nil, err
		}
		p.tgt = &localTarget{e: e}
	} else {
		r, err := startRemoteTarget(tb, tgtDev, size, initMD)
		if err != nil {
			init.close()
			return nil, err
		}
		p.tgt = r
	}
	if _, err := init.agent.LoadRemoteMD(p.tgt.md()); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

func (p *pair) close() error {
	err := p.tgt.close()
	if ierr := p.init.close(); err == nil {
		err = ierr
	}
	return err
}

// remoteDesc returns a descriptor of n bytes at offset off of the target's
// buffer.
func (p *pair) remoteDesc(off, n uint64) nixl.Desc {
	base, _, dev := p.tgt.buf()
	return nixl.Desc{Addr: base + off, Len: n, DevID: dev}
}

// xfer creates, posts and waits for one transfer, then releases it.
func (p *pair) xfer(op nixl.XferOp, local, remote nixl.XferList, notif []byte) error {
	var opts *nixl.Options
	if notif != nil {
		opts = nixl.NotifOptions(notif)
	}
	a := p.init.agent
	h, err := a.CreateXferReq(op, local, remote, p.tgt.name(), opts)
	if err != nil {
		return err
	}
	defer a.ReleaseXferReq(h)
	st, err := a.PostXferReq(h, nil)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(waitLimit)
	for st != nixl.StatusSuccess {
		p.tgt.progress()
		if st, err = a.XferStatus(h); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s of %d bytes in %d descriptors still in flight after %s", op, local.TotalBytes(), len(local.Descs), waitLimit)
		}
	}
	return nil
}

// spansOf returns, for a transfer from src descriptors (in a buffer that
// starts at srcBase) to dst descriptors, the spans the source must hold
// (srcSpans, the buffer's own pattern offsets) and the spans the
// destination must hold afterwards.
func spansOf(src, dst []nixl.Desc, srcBase uint64) (srcSpans, dstSpans []span) {
	for i := range src {
		off := src[i].Addr - srcBase
		srcSpans = append(srcSpans, span{Addr: src[i].Addr, PatOff: off, Len: src[i].Len})
		dstSpans = append(dstSpans, span{Addr: dst[i].Addr, PatOff: off, Len: dst[i].Len})
	}
	return srcSpans, dstSpans
}

// verifiedXfer fills the source side with seed, zeroes the destination,
// runs the transfer and checks every destination byte.
func (p *pair) verifiedXfer(op nixl.XferOp, local, remote nixl.XferList, notif []byte, seed uint64) error {
	_, size, _ := p.tgt.buf()
	if op == nixl.Write {
		srcSpans, dstSpans := spansOf(local.Descs, remote.Descs, p.init.base)
		if err := fillSpans(p.init.m, seed, srcSpans); err != nil {
			return err
		}
		if err := p.tgt.zero(0, size); err != nil {
			return err
		}
		if err := p.xfer(op, local, remote, notif); err != nil {
			return err
		}
		return p.tgt.check(seed, dstSpans)
	}
	base, _, _ := p.tgt.buf()
	srcSpans, dstSpans := spansOf(remote.Descs, local.Descs, base)
	if err := p.tgt.fill(seed, srcSpans); err != nil {
		return err
	}
	if err := p.init.m.set(p.init.base, 0, p.init.size); err != nil {
		return err
	}
	if err := p.xfer(op, local, remote, notif); err != nil {
		return err
	}
	return checkPattern(p.init.m, seed, dstSpans)
}
