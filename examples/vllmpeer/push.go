package vllmpeer

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"time"

	"github.com/gonixl/gonixl/nixl"
	"github.com/vmihailenco/msgpack/v5"
)

// PrefillInfo is what a push decode knows of the prefill engine before
// prefill runs (the proxy learns it from the prefill engine): its
// kv_transfer_params' remote_* keys, tp_size and pp_size.
type PrefillInfo struct {
	EngineID string
	Host     string
	Port     int
	TPSize   int
	PPSize   int // default 1
}

// pushWait is a push decode request waiting for prefill's WRITEs.
type pushWait struct {
	blocks   []int
	expected []int // per rank: pp * max(1, P_tp/D_tp), from the first WRITE's count
	count    []int
	pp       int
}

// PushRegister plays a vLLM push decode that allocated local for reqID: a
// notif-only handshake with the prefill engine (its agents loaded, no
// layout), then PUSH_REG (11 keys) from every local rank to every prefill
// agent it handshook. WaitPushed waits for the WRITEs.
func (p *Peer) PushRegister(ctx context.Context, reqID string, pf PrefillInfo, local []int) error {
	if p.cfg.Mode != ModePush {
		return fmt.Errorf("vllmpeer: PushRegister on a %s engine", p.cfg.Mode)
	}
	if pf.PPSize == 0 {
		pf.PPSize = 1
	}
	if err := p.kv[0].checkBlocks(local); err != nil {
		return err
	}
	re, err := p.handshake(ctx, pf.EngineID, pf.Host, pf.Port, pf.TPSize, true)
	if err != nil {
		return err
	}
	tp := p.cfg.TPSize
	p.mu.Lock()
	if _, dup := p.pushWait[reqID]; dup {
		p.mu.Unlock()
		return fmt.Errorf("vllmpeer: request %q is already registered", reqID)
	}
	p.pushWait[reqID] = &pushWait{blocks: append([]int(nil), local...), expected: make([]int, tp), count: make([]int, tp), pp: pf.PPSize}
	p.mu.Unlock()
	reg := pushReg{RequestID: reqID, DecodeEngineID: p.cfg.EngineID, DecodeHost: p.side.host, DecodePort: p.side.port,
		DecodeTPSize: tp, LocalBlockIDs: [][]int{append([]int{}, local...)}, RemoteEngineID: pf.EngineID,
		RemoteHost: pf.Host, RemotePort: pf.Port, RemoteTPSize: pf.TPSize, RemotePPSize: pf.PPSize}
	body, err := encode(&reg)
	if err != nil {
		return err
	}
	msg := append([]byte(pushRegPrefix), body...)
	for key, name := range re.agents {
		if err := p.agents[key[0]].GenNotif(name, msg, nil); err != nil {
			return fmt.Errorf("vllmpeer: rank %d: PUSH_REG to %s: %w", key[0], name, err)
		}
	}
	return nil
}

// onPushed counts a WRITE's notification "<id>:<P_tp>" on rank r.
func (p *Peer) onPushed(r int, w *pushWait, id string, ptp int) {
	if w.expected[r] == 0 {
		w.expected[r] = w.pp * max(1, ptp/p.cfg.TPSize)
	}
	w.count[r]++
}

// WaitPushed waits until every local rank counted its WRITEs for reqID.
func (p *Peer) WaitPushed(reqID string, timeout time.Duration) error {
	return p.waitFor(timeout, "WRITEs of "+reqID, func() bool {
		w := p.pushWait[reqID]
		if w == nil {
			return false
		}
		for r := range w.count {
			if w.expected[r] == 0 || w.count[r] < w.expected[r] {
				return false
			}
		}
		return true
	})
}

// PushCounts returns, per local rank, the WRITE notifications counted for
// reqID and the count expected (0 before the first).
func (p *Peer) PushCounts(reqID string) (count, expected []int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := p.pushWait[reqID]
	if w == nil {
		return nil, nil
	}
	return append([]int(nil), w.count...), append([]int(nil), w.expected...)
}

// PushParams are the kv_transfer_params vLLM's push scheduler writes for a
// finished prefill request: no dcp_size, no expiry.
type PushParams struct {
	DoRemotePrefill bool    `json:"do_remote_prefill"`
	DoRemoteDecode  bool    `json:"do_remote_decode"`
	RemoteBlockIDs  [][]int `json:"remote_block_ids"`
	RemoteEngineID  string  `json:"remote_engine_id"`
	RemoteRequestID string  `json:"remote_request_id"`
	RemoteHost      string  `json:"remote_host"`
	RemotePort      int     `json:"remote_port"`
	TPSize          int     `json:"tp_size"`
	PPSize          int     `json:"pp_size"`
	RemoteNumTokens int     `json:"remote_num_tokens"`
	TransferMode    string  `json:"transfer_mode"`
}

// pushHeld is a push prefill request waiting for registrations.
type pushHeld struct {
	blocks  []int
	started []bool // per rank: its WRITEs were started
	done    []bool // per rank: its WRITEs completed
	failed  []string
}

// PushRegSeen is one PUSH_REG a prefill rank received.
type PushRegSeen struct {
	Rank int
	Keys []string // in wire order
	Reg  PushReg
}

// PushReg is PUSH_REG's map, decoded.
type PushReg = pushReg

// PushFinished plays a vLLM push prefill whose request finished: it writes
// the prompt's KV into blocks and, on each rank, WRITEs them to the decode
// named by the matching PUSH_REG (whichever comes first waits for the
// other), after a full handshake with that decode.
func (p *Peer) PushFinished(reqID string, tokens, blocks []int) (PushParams, error) {
	if p.cfg.Mode != ModePush {
		return PushParams{}, fmt.Errorf("vllmpeer: PushFinished on a %s engine", p.cfg.Mode)
	}
	if err := p.Fill(tokens, blocks); err != nil {
		return PushParams{}, err
	}
	tp := p.cfg.TPSize
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, dup := p.pushHeld[reqID]; dup {
		return PushParams{}, fmt.Errorf("vllmpeer: request %q is already held", reqID)
	}
	h := &pushHeld{blocks: append([]int(nil), blocks...), started: make([]bool, tp), done: make([]bool, tp)}
	p.pushHeld[reqID] = h
	for r := range tp {
		for i, reg := range p.pendingRegs[r] {
			if matches(reqID, reg.RequestID) {
				p.pendingRegs[r] = append(p.pendingRegs[r][:i:i], p.pendingRegs[r][i+1:]...)
				p.startPush(r, reqID, h, reg)
				break
			}
		}
	}
	return PushParams{DoRemotePrefill: true, RemoteBlockIDs: [][]int{append([]int{}, blocks...)}, RemoteEngineID: p.cfg.EngineID,
		RemoteRequestID: reqID, RemoteHost: p.side.host, RemotePort: p.side.port, TPSize: tp, PPSize: 1,
		RemoteNumTokens: len(tokens), TransferMode: ModePush}, nil
}

// onPushReg handles a PUSH_REG on rank r: like vLLM, a payload that is not
// a map with a str request_id is dropped; a match starts the WRITEs, else
// the registration waits.
func (p *Peer) onPushReg(r int, msg []byte) {
	body := msg[len(pushRegPrefix):]
	keys, err := mapKeys(body)
	if err != nil {
		p.problem("rank %d: PUSH_REG: %v", r, err)
		return
	}
	var reg pushReg
	if err := msgpack.Unmarshal(body, &reg); err != nil || reg.RequestID == "" {
		p.problem("rank %d: PUSH_REG without a str request_id (%v)", r, err)
		return
	}
	p.pushRegs = append(p.pushRegs, PushRegSeen{Rank: r, Keys: keys, Reg: reg})
	for id, h := range p.pushHeld {
		if !h.started[r] && matches(id, reg.RequestID) {
			p.startPush(r, id, h, reg)
			return
		}
	}
	p.pendingRegs[r] = append(p.pendingRegs[r], reg)
}

// mapKeys returns a msgpack map's keys in wire order.
func mapKeys(b []byte) ([]string, error) {
	dec := msgpack.NewDecoder(bytes.NewReader(b))
	n, err := dec.DecodeMapLen()
	if err != nil {
		return nil, fmt.Errorf("not a map: %w", err)
	}
	keys := make([]string, 0, min(max(n, 0), len(b))) // a header may claim more keys than the bytes hold
	for range n {
		k, err := dec.DecodeString()
		if err != nil {
			return nil, fmt.Errorf("key %d: %w", len(keys), err)
		}
		keys = append(keys, k)
		if err := dec.Skip(); err != nil {
			return nil, fmt.Errorf("value of %q: %w", k, err)
		}
	}
	return keys, nil
}

var baseSuffix = regexp.MustCompile(`(?i)-[0-9a-f]{8}$`)

// matches is vLLM's push matching: the same id, or the same id once a
// trailing "-" and 8 hex digits are stripped from both.
func matches(a, b string) bool {
	return a == b || baseSuffix.ReplaceAllString(a, "") == baseSuffix.ReplaceAllString(b, "")
}

// startPush starts rank r's WRITEs of request id to the decode reg names,
// in a goroutine of its own (the handshake may take a while); with mu held.
func (p *Peer) startPush(r int, id string, h *pushHeld, reg pushReg) {
	h.started[r] = true
	p.work.Add(1)
	go func() {
		defer p.work.Done()
		err := p.push(r, id, h.blocks, reg)
		p.mu.Lock()
		defer p.mu.Unlock()
		if err != nil {
			h.failed = append(h.failed, fmt.Sprintf("rank %d: %v", r, err))
			p.problem("push %s rank %d: %v", id, r, err)
		}
		h.done[r] = true
		for _, d := range h.done {
			if !d {
				p.signal()
				return
			}
		}
		delete(p.pushHeld, id)
		if len(h.failed) == 0 {
			p.written = append(p.written, id)
		}
		p.signal()
	}()
}

// push does one prefill rank's part: a full handshake with the decode,
// then one WRITE per decode rank it targets with "<D request id>:<P_tp>".
func (p *Peer) push(r int, id string, blocks []int, reg pushReg) error {
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	re, err := p.handshake(ctx, reg.DecodeEngineID, reg.DecodeHost, reg.DecodePort, reg.DecodeTPSize, false)
	if err != nil {
		return err
	}
	if len(reg.LocalBlockIDs) != 1 {
		return fmt.Errorf("PUSH_REG local_block_ids has %d groups; the peer plays one", len(reg.LocalBlockIDs))
	}
	remote := reg.LocalBlockIDs[0]
	local := blocks
	if len(remote) < len(local) { // D holds only the uncached suffix
		local = local[len(local)-len(remote):]
	} else if len(remote) > len(local) {
		return fmt.Errorf("PUSH_REG for %s names %d decode blocks for %d prefill ones", reg.RequestID, len(remote), len(local))
	}
	notif := fmt.Sprintf("%s:%d", reg.RequestID, p.cfg.TPSize)
	ts, _ := targetRanks(p.cfg.TPSize, reg.DecodeTPSize, r)
	for _, dr := range ts {
		if err := p.xfer(ctx, nixl.Write, r, re, dr, local, remote, notif); err != nil {
			return err
		}
	}
	return nil
}

// WaitWritten waits until every rank's WRITEs of push request id completed.
func (p *Peer) WaitWritten(id string, timeout time.Duration) error {
	return p.waitFor(timeout, "WRITEs of "+id, func() bool {
		for _, w := range p.written {
			if w == id {
				return true
			}
		}
		return false
	})
}
