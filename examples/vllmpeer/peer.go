package vllmpeer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gonixl/gonixl/nixl"
)

// Transfer modes, the last factor of the compatibility hash.
const (
	ModePull = "pull"
	ModePush = "push"
)

// Defaults of vLLM's connector (kv_connector_extra_config and the REQ
// socket's receive timeout).
const (
	DefaultLease            = 30 * time.Second
	DefaultHandshakeTimeout = 5 * time.Second
	DefaultKVLayout         = "LBHNC"
	DefaultAttnBackend      = "FLASH_ATTN"
)

// Config configures a Peer. Model, EngineID, VLLMVersion and NewAgent are
// required; the other zero fields take vLLM's defaults.
type Config struct {
	EngineID string
	Model    Model
	TPSize   int
	// Mode is ModePull (default) or ModePush: the transfer_mode of the hash.
	Mode string
	// VLLMVersion, AttnBackend (default FLASH_ATTN) and CacheDType (default
	// auto) are hash factors; DisableHMA sets is_hma_enabled false.
	VLLMVersion, AttnBackend, CacheDType string
	DisableHMA                           bool
	// Hash, when set, replaces the computed compatibility hash (to play an
	// incompatible engine).
	Hash string
	// KVLayout is kv_cache_layout (default "LBHNC", as a vLLM worker
	// publishes it); a peer's must equal it.
	KVLayout string
	// Groups is, per layer (each layer is one region), the KV-cache group
	// it belongs to: vLLM's region_group_ids, group indexes 0, 1, ... in
	// the order of the request's block-id lists (a sliding-window model's
	// full and window layers, say). Nil is one group. The peer plays
	// attention groups of one block size without shared tensors, as pull
	// prefill (PrefillGroups).
	Groups []int
	// Host and Port are the side channel (VLLM_NIXL_SIDE_CHANNEL_HOST and
	// _PORT plus the data-parallel index); defaults 127.0.0.1 and 0, a free
	// port.
	Host string
	Port int
	// NewAgent makes the NIXL agent of each TP rank; the peer closes them.
	NewAgent func(name string) (nixl.Agent, error)
	// Lease is kv_lease_duration (default 30 s): how long prefill holds
	// finished blocks; a heartbeat extends it to at least 2/3 of it ahead.
	Lease time.Duration
	// HandshakeTimeout bounds each side-channel answer (default 5 s).
	HandshakeTimeout time.Duration
	// Now is the clock of leases (default time.Now).
	Now func() time.Time
}

// Peer is one vLLM engine played in Go: a NIXL agent and KV memory per TP
// rank, the side channel, and the state of the four roles. Its methods are
// safe for concurrent use.
type Peer struct {
	cfg       Config
	hash      string
	agents    []nixl.Agent
	kv        []*rankKV
	side      *listener
	stop      chan struct{}
	polled    sync.WaitGroup
	ctx       context.Context // cancelled by Close: ends the WRITE goroutines' waits
	cancel    context.CancelFunc
	work      sync.WaitGroup // the WRITE goroutines
	closeOnce sync.Once
	hsMu      sync.Mutex // serializes handshakes

	mu sync.Mutex
	// pull prefill
	held map[string]*held
	// every notification each rank got, as text, in arrival order
	notifs  [][]string
	freed   []string // pull prefill: ids freed on their completions, in order
	expired []string // pull prefill: ids freed at the lease's end
	// push decode: registrations waiting for WRITEs
	pushWait map[string]*pushWait
	// push prefill: finished requests and registrations not yet matched
	pushHeld    map[string]*pushHeld
	pushRegs    []PushRegSeen
	pendingRegs [][]pushReg              // per rank: registrations no finished request matched yet
	written     []string                 // push prefill: requests whose WRITEs all completed
	remotes     map[string]*remoteEngine // by engine id
	changed     chan struct{}            // closed and replaced on every state change
	problems    []string
}

// New builds the peer: agents, registered KV memory, the side channel
// serving every rank's NixlHandshakePayload, and one goroutine reading
// notifications.
func New(cfg Config) (_ *Peer, err error) {
	cfg.Mode = cmp.Or(cfg.Mode, ModePull)
	cfg.AttnBackend = cmp.Or(cfg.AttnBackend, DefaultAttnBackend)
	cfg.CacheDType = cmp.Or(cfg.CacheDType, "auto")
	cfg.KVLayout = cmp.Or(cfg.KVLayout, DefaultKVLayout)
	cfg.Host = cmp.Or(cfg.Host, "127.0.0.1")
	cfg.Lease = cmp.Or(cfg.Lease, DefaultLease)
	cfg.HandshakeTimeout = cmp.Or(cfg.HandshakeTimeout, DefaultHandshakeTimeout)
	cfg.TPSize = cmp.Or(cfg.TPSize, 1)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	switch {
	case cfg.EngineID == "":
		return nil, fmt.Errorf("vllmpeer: Config.EngineID is empty")
	case cfg.VLLMVersion == "":
		return nil, fmt.Errorf("vllmpeer: Config.VLLMVersion is empty: the hash needs the peers' exact vLLM version")
	case cfg.NewAgent == nil:
		return nil, fmt.Errorf("vllmpeer: Config.NewAgent is nil")
	case cfg.Mode != ModePull && cfg.Mode != ModePush:
		return nil, fmt.Errorf("vllmpeer: Config.Mode is %q, want %q or %q", cfg.Mode, ModePull, ModePush)
	}
	if err := cfg.Model.validate(cfg.TPSize); err != nil {
		return nil, err
	}
	if err := validGroups(cfg.Groups, cfg.Model.Layers); err != nil {
		return nil, err
	}
	p := &Peer{cfg: cfg, stop: make(chan struct{}), held: map[string]*held{}, notifs: make([][]string, cfg.TPSize),
		pushWait: map[string]*pushWait{}, pushHeld: map[string]*pushHeld{}, remotes: map[string]*remoteEngine{},
		changed: make(chan struct{}), pendingRegs: make([][]pushReg, cfg.TPSize)}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.hash = cfg.Hash
	if p.hash == "" {
		if p.hash, err = p.Factors().Hash(); err != nil {
			return nil, err
		}
	}
	defer func() {
		if err != nil {
			p.release()
		}
	}()
	payloads := map[[2]int][]byte{}
	for r := range cfg.TPSize {
		a, err := cfg.NewAgent(fmt.Sprintf("%s-tp%d", cfg.EngineID, r))
		if err != nil {
			return nil, fmt.Errorf("vllmpeer: agent of rank %d: %w", r, err)
		}
		p.agents = append(p.agents, a)
		k, err := newRankKV(cfg.Model, cfg.TPSize, r)
		if err != nil {
			return nil, err
		}
		p.kv = append(p.kv, k)
		if err := a.RegisterMem(k.regList(), nil); err != nil {
			return nil, fmt.Errorf("vllmpeer: register KV memory of rank %d: %w", r, err)
		}
		payload, err := p.payload(r)
		if err != nil {
			return nil, err
		}
		payloads[[2]int{0, r}] = payload
	}
	if p.side, err = listen(cfg.Host, cfg.Port, payloads); err != nil {
		return nil, err
	}
	p.polled.Add(1)
	go p.poll()
	return p, nil
}

// Factors returns the peer's hash factors.
func (p *Peer) Factors() HashFactors {
	c := p.cfg
	return HashFactors{VLLMVersion: c.VLLMVersion, Model: c.Model.Name, DType: "torch." + c.Model.DType,
		NumKVHeads: c.Model.KVHeads, HeadSize: c.Model.HeadDim, NumHiddenLayers: c.Model.Layers,
		AttnBackendName: c.AttnBackend, CacheDType: c.CacheDType, HMAEnabled: !c.DisableHMA, TransferMode: c.Mode}
}

// Hash returns the compatibility hash the peer sends and requires.
func (p *Peer) Hash() string { return p.hash }

// EngineID returns the engine id.
func (p *Peer) EngineID() string { return p.cfg.EngineID }

// Host returns the side channel's address (resolved), as the params carry it.
func (p *Peer) Host() string { return p.side.host }

// Port returns the side channel's port.
func (p *Peer) Port() int { return p.side.port }

// TPSize returns the peer's tensor-parallel size.
func (p *Peer) TPSize() int { return p.cfg.TPSize }

// payload builds rank r's NixlHandshakePayload: the hash and, as opaque
// bytes, its NixlAgentMetadata, filled as vLLM's register_kv_caches does
// for attention layers with K and V packed per layer, one region each:
// region_group_ids is each region's KV-cache group (Config.Groups; all 0
// for one group).
func (p *Peer) payload(r int) ([]byte, error) {
	md, err := p.agents[r].LocalMD()
	if err != nil {
		return nil, fmt.Errorf("vllmpeer: metadata of rank %d's agent: %w", r, err)
	}
	k := p.kv[r]
	n := p.cfg.Model.Layers
	m := agentMetadata{EngineID: p.cfg.EngineID, AgentMetadata: md, NumBlocks: p.cfg.Model.NumBlocks,
		KVCacheLayout: p.cfg.KVLayout, BlockSize: p.cfg.Model.BlockSize, AttnBackendName: p.cfg.AttnBackend,
		PhysicalBlocksPerLogical: 1, DCPSize: 1, PCPSize: 1, RegionMembers: [][]string{},
		KVCachesBaseAddr: make([]uint64, n), BlockLens: make([]uint64, n), BlockStrides: make([]uint64, n),
		RegionNumBlocks: make([]int, n), RegionGroupIDs: make([]int, n), RegionMemTypes: make([]string, n)}
	copy(m.RegionGroupIDs, p.cfg.Groups)
	for i := range n {
		m.KVCachesBaseAddr[i] = k.regionBase(i)
		m.BlockLens[i], m.BlockStrides[i] = uint64(k.blockLen), uint64(k.blockLen)
		m.RegionNumBlocks[i], m.RegionMemTypes[i] = p.cfg.Model.NumBlocks, "DRAM"
	}
	inner, err := encode(&m)
	if err != nil {
		return nil, err
	}
	return encode(&handshakePayload{CompatibilityHash: p.hash, AgentMetadataBytes: inner})
}

// Bytes returns rank r's KV buffer, for tests that write or read it
// directly.
func (p *Peer) Bytes(r int) []byte { return p.kv[r].buf.Bytes() }

// Fill writes a prompt's KV (docs/kvfill.md) into blocks on every rank.
func (p *Peer) Fill(tokens, blocks []int) error {
	if err := p.kv[0].checkBlocks(blocks); err != nil {
		return err
	}
	ph := PrefixHashes(tokens)
	for _, k := range p.kv {
		k.fill(blocks, ph)
	}
	return nil
}

// Verify checks blocks on every rank against a prompt's KV.
func (p *Peer) Verify(tokens, blocks []int) Check { return p.VerifyFrom(tokens, blocks, 0) }

// VerifyFrom checks blocks, the request's blocks from its block first on
// (a decode with the first ones cached), on every rank.
func (p *Peer) VerifyFrom(tokens, blocks []int, first int) Check {
	ph := PrefixHashes(tokens)
	var c Check
	for _, k := range p.kv {
		rc := k.checkFrom(blocks, first, ph)
		c.OKBytes += rc.OKBytes
		c.BadBytes += rc.BadBytes
		if c.First == "" {
			c.First = rc.First
		}
	}
	return c
}

// Close stops the peer: the side channel, the notification reader, the
// agents and the memory.
func (p *Peer) Close() error {
	p.closeOnce.Do(p.shut)
	return nil
}

func (p *Peer) shut() {
	p.cancel()
	p.work.Wait()
	close(p.stop)
	p.polled.Wait()
	p.release()
}

func (p *Peer) release() {
	if p.cancel != nil {
		p.cancel()
	}
	if p.side != nil {
		p.side.close()
	}
	for i, a := range p.agents {
		if i < len(p.kv) {
			_ = a.DeregisterMem(p.kv[i].regList(), nil)
		}
		a.Close()
	}
	for _, k := range p.kv {
		k.buf.Free()
	}
}

// signal wakes every waiter; call with mu held.
func (p *Peer) signal() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// waitFor waits until cond (called with mu held) returns true or the
// deadline passes.
func (p *Peer) waitFor(timeout time.Duration, what string, cond func() bool) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		if cond() {
			p.mu.Unlock()
			return nil
		}
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			return fmt.Errorf("vllmpeer: %s: not within %v", what, timeout)
		case <-p.stop:
			return errors.New("vllmpeer: peer closed")
		}
	}
}

// problem records something a peer did wrong (a notification for an
// unknown request, a malformed PUSH_REG): vLLM logs those and goes on.
func (p *Peer) problem(format string, args ...any) {
	p.problems = append(p.problems, fmt.Sprintf(format, args...))
}
