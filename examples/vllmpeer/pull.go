package vllmpeer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gonixl/gonixl/nixl"
)

// held is a pull prefill request whose blocks wait for decode's READs.
type held struct {
	blocks   []int
	deadline time.Time
	expected []int // per rank: the count the first completion named, 0 before
	count    []int // per rank: completions seen
	beats    int   // heartbeats that named it
}

// Prefill plays a vLLM prefill whose request finished: it writes the
// prompt's KV into blocks on every rank, holds them for the lease and
// returns the kv_transfer_params vLLM's pull scheduler writes.
func (p *Peer) Prefill(reqID string, tokens, blocks []int) (Params, error) {
	if err := p.Fill(tokens, blocks); err != nil {
		return Params{}, err
	}
	return p.Hold(reqID, blocks, len(tokens))
}

// Hold holds blocks whose content the caller wrote, as Prefill does after
// its fill.
func (p *Peer) Hold(reqID string, blocks []int, numTokens int) (Params, error) {
	if p.cfg.Mode != ModePull {
		return Params{}, fmt.Errorf("vllmpeer: Hold on a %s engine; use PushFinished", p.cfg.Mode)
	}
	if err := p.kv[0].checkBlocks(blocks); err != nil {
		return Params{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, dup := p.held[reqID]; dup {
		return Params{}, fmt.Errorf("vllmpeer: request %q is already held", reqID)
	}
	tp := p.cfg.TPSize
	p.held[reqID] = &held{blocks: append([]int(nil), blocks...), deadline: p.cfg.Now().Add(p.cfg.Lease),
		expected: make([]int, tp), count: make([]int, tp)}
	return Params{DoRemotePrefill: true, DoRemoteDecode: false, RemoteBlockIDs: [][]int{append([]int{}, blocks...)},
		RemoteEngineID: p.cfg.EngineID, RemoteRequestID: reqID, RemoteHost: p.side.host, RemotePort: p.side.port,
		TPSize: tp, DCPSize: 1, PPSize: 1, RemoteNumTokens: numTokens, TransferMode: ModePull}, nil
}

// onCompletion counts a pull completion "<id>:<n>" on rank r. vLLM splits
// at the last colon, ignores ids it does not track, and frees once a rank
// has as many as the first said.
func (p *Peer) onCompletion(r int, msg string) {
	i := strings.LastIndexByte(msg, ':')
	if i < 0 {
		p.problem("rank %d: notification %q is neither HB:, PUSH_REG: nor <id>:<count>", r, msg)
		return
	}
	id, ns := msg[:i], msg[i+1:]
	n, err := strconv.Atoi(ns)
	if err != nil || n < 1 {
		p.problem("rank %d: completion %q: count %q is not a positive integer", r, msg, ns)
		return
	}
	if w := p.pushWait[id]; w != nil {
		p.onPushed(r, w, id, n)
		return
	}
	h := p.held[id]
	if h == nil {
		p.problem("rank %d: completion %q for a request not held", r, msg)
		return
	}
	if h.expected[r] == 0 {
		h.expected[r] = n
	}
	h.count[r]++
	for i := range h.count {
		if h.count[i] < h.expected[i] || h.expected[i] == 0 {
			return
		}
	}
	delete(p.held, id)
	p.freed = append(p.freed, id)
}

// onHeartbeat extends the lease of every named request held: to at least
// 2/3 of a lease from now, never shorter than it was.
func (p *Peer) onHeartbeat(msg string) {
	for _, id := range strings.Split(strings.TrimPrefix(msg, heartbeatPrefix), ",") {
		if h := p.held[id]; h != nil {
			h.beats++
			if d := p.cfg.Now().Add(p.cfg.Lease * 2 / 3); d.After(h.deadline) {
				h.deadline = d
			}
		}
	}
}

// reap frees the requests whose lease ended.
func (p *Peer) reap() {
	now := p.cfg.Now()
	for id, h := range p.held {
		if !now.Before(h.deadline) {
			delete(p.held, id)
			p.expired = append(p.expired, id)
			p.signal()
		}
	}
}

// Report is what a peer saw, for tests to assert.
type Report struct {
	// Notifs are the notifications each rank's agent received, as text, in
	// arrival order (PUSH_REG payloads as "PUSH_REG:" + the msgpack bytes).
	Notifs [][]string
	// Freed are the pull requests freed on their completions, in order;
	// Expired those freed at the lease's end.
	Freed, Expired []string
	// Held are the pull requests still held.
	Held []string
	// Heartbeats counts, per held request, the heartbeats that named it.
	Heartbeats map[string]int
	// Written are the push requests whose WRITEs all completed.
	Written []string
	// PushRegs are the registrations received, decoded.
	PushRegs []PushRegSeen
	// Problems are the notifications and requests the peer refused.
	Problems []string
	// SideChannelAsks counts the GET_META_MSG requests answered.
	SideChannelAsks int
}

// Report returns what the peer saw so far.
func (p *Peer) Report() Report {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := Report{Heartbeats: map[string]int{}, Freed: append([]string(nil), p.freed...), Expired: append([]string(nil), p.expired...),
		Written: append([]string(nil), p.written...), PushRegs: append([]PushRegSeen(nil), p.pushRegs...),
		Problems: append([]string(nil), p.problems...)}
	for _, n := range p.notifs {
		r.Notifs = append(r.Notifs, append([]string(nil), n...))
	}
	for id, h := range p.held {
		r.Held = append(r.Held, id)
		r.Heartbeats[id] = h.beats
	}
	p.side.mu.Lock()
	r.SideChannelAsks = p.side.asks
	r.Problems = append(r.Problems, p.side.bad...)
	p.side.mu.Unlock()
	return r
}

// WaitFreed waits until the pull request id was freed on its completions.
func (p *Peer) WaitFreed(id string, timeout time.Duration) error {
	return p.waitFor(timeout, "request "+id+" freed", func() bool {
		for _, f := range p.freed {
			if f == id {
				return true
			}
		}
		return false
	})
}

// ErrExpired is the error of a pull whose params' deadline, mapped through
// the handshake's clock offset, is less than 5 s away (vLLM's safety
// margin): vLLM declines the READ.
var ErrExpired = errors.New("vllmpeer: the remote blocks expire within the 5 s safety margin")

// PullResult is what a pull decode did.
type PullResult struct {
	// Sent are the completion notifications, per local rank, as
	// "<remote agent>=<text>".
	Sent [][]string
	// FlatBlockIDs is set when the params' remote_block_ids were one flat
	// list (gonixl's form), not vLLM's list per group.
	FlatBlockIDs bool
}

// Pull plays a vLLM decode given kv_transfer_params: it handshakes with the
// prefill engine (two-phase decode, hash check), READs the blocks into
// local with vLLM's descriptor ids, one READ per (local rank, remote rank),
// each carrying the completion "<remote_request_id>:<max(1, D_tp/P_tp)>",
// and waits for them. An empty local list (a full local prefix hit) sends
// the completion with no READ.
func (p *Peer) Pull(ctx context.Context, reqID string, prm Params, local []int) (PullResult, error) {
	res := PullResult{FlatBlockIDs: prm.FlatBlockIDs}
	if !prm.DoRemotePrefill {
		return res, fmt.Errorf("vllmpeer: request %s: do_remote_prefill is not set", reqID)
	}
	if err := p.kv[0].checkBlocks(local); err != nil {
		return res, err
	}
	re, err := p.handshake(ctx, prm.RemoteEngineID, prm.RemoteHost, prm.RemotePort, prm.TPSize, false)
	if err != nil {
		return res, err
	}
	if e := prm.RemoteBlocksExpiryTime; e != nil {
		if monotonic()+5.0 >= *e-re.offset {
			return res, fmt.Errorf("%w: request %s, remote_blocks_expiry_time %.3f is %.3f s from now on the remote clock", ErrExpired, reqID, *e, *e-re.offset-monotonic())
		}
	}
	remote := prm.blocks()
	if len(local) < len(remote) { // D holds only the uncached suffix
		remote = remote[len(remote)-len(local):]
	} else if len(local) > len(remote) {
		return res, fmt.Errorf("vllmpeer: request %s: %d local blocks for %d remote ones", reqID, len(local), len(remote))
	}
	notif := fmt.Sprintf("%s:%d", prm.RemoteRequestID, max(1, p.cfg.TPSize/prm.TPSize))
	res.Sent = make([][]string, p.cfg.TPSize)
	for lr := range p.cfg.TPSize {
		ts, _ := targetRanks(p.cfg.TPSize, prm.TPSize, lr)
		for _, rr := range ts {
			name := re.agents[[2]int{lr, rr}]
			if len(local) == 0 {
				if err := p.agents[lr].GenNotif(name, []byte(notif), nil); err != nil {
					return res, fmt.Errorf("vllmpeer: rank %d: completion to %s: %w", lr, name, err)
				}
			} else if err := p.xfer(ctx, nixl.Read, lr, re, rr, local, remote, notif); err != nil {
				return res, err
			}
			res.Sent[lr] = append(res.Sent[lr], name+"="+notif)
		}
	}
	return res, nil
}

// Heartbeat sends "HB:<id>,<id>,..." from every local rank to every agent
// of engine it handshook, as vLLM's decode does every lease/6.
func (p *Peer) Heartbeat(engineID string, ids []string) error {
	p.mu.Lock()
	re := p.remotes[engineID]
	p.mu.Unlock()
	if re == nil {
		return fmt.Errorf("vllmpeer: no handshake with engine %q yet", engineID)
	}
	msg := []byte(heartbeatPrefix + strings.Join(ids, ","))
	for key, name := range re.agents {
		if err := p.agents[key[0]].GenNotif(name, msg, nil); err != nil {
			return fmt.Errorf("vllmpeer: rank %d: heartbeat to %s: %w", key[0], name, err)
		}
	}
	return nil
}

// Forget drops what the handshake with engineID learned (vLLM's engine_ttl
// eviction), so that the next transfer handshakes again.
func (p *Peer) Forget(engineID string) {
	p.mu.Lock()
	re := p.remotes[engineID]
	delete(p.remotes, engineID)
	p.mu.Unlock()
	if re == nil {
		return
	}
	for key, name := range re.agents {
		_ = p.agents[key[0]].InvalidateRemoteMD(name)
	}
}
