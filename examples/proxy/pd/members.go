package pd

import (
	"fmt"

	"go.uber.org/zap"
)

// Member is an engine found in a registry (examples/discovery follows etcd): the proxy
// routes to it while it is in the last SetMembers.
type Member struct {
	// Role is "prefill" or "decode".
	Role string
	// URL is the engine's HTTP base URL; a bare host:port gets "http://".
	URL string
	// EngineID and Incarnation name the engine; an engine that restarts under its id comes
	// back with a new Incarnation and is a new engine to the proxy (fresh counters, in
	// rotation again).
	EngineID, Incarnation string
	// Connector is "pull" or "push"; an engine whose connector is not the proxy's is kept
	// out of rotation.
	Connector string
	// CompatHash: a prefill and a decode engine are paired only when their hashes agree.
	CompatHash string
	// Model, SideChannelHost, SideChannelPort, TPSize and PPSize are what GET
	// /kv_transfer_info would say (push sends them to decode).
	Model           string
	SideChannelHost string
	SideChannelPort int
	TPSize, PPSize  int
}

// key names a member's incarnation.
func (m Member) key() string { return m.Role + "/" + m.EngineID + "/" + m.Incarnation }

// pools are the engines requests are routed across.
type pools struct {
	prefill, decode, all []*engine
}

func (p *Proxy) pools() *pools { return p.cur.Load() }

// SetMembers replaces the registry's engines (Config.Dynamic) with ms: new ones enter
// rotation at once (they registered once they served), and are health-checked like the
// others; those no longer listed leave rotation at once (legs in flight on them go on).
// Engines given in Config.Prefill and Config.Decode stay. A member that is not usable is
// logged and skipped. Without Config.Dynamic it does nothing but log.
func (p *Proxy) SetMembers(ms []Member) {
	if !p.cfg.Dynamic {
		p.log.Error("SetMembers without Config.Dynamic: ignored")
		return
	}
	p.membersMu.Lock()
	defer p.membersMu.Unlock()
	old := map[string]*engine{}
	for _, e := range p.pools().all {
		if e.member != "" {
			old[e.member] = e
		}
	}
	next := &pools{
		prefill: append([]*engine(nil), p.static.prefill...),
		decode:  append([]*engine(nil), p.static.decode...),
		all:     append([]*engine(nil), p.static.all...),
	}
	seen := map[string]bool{}
	for _, m := range ms {
		e, err := p.memberEngine(m, old)
		if err != nil {
			p.log.Warn("registry engine skipped", zap.String("engine_id", m.EngineID), zap.Error(err))
			continue
		}
		if seen[e.member] {
			continue
		}
		seen[e.member] = true
		if old[e.member] == nil {
			p.log.Info("engine joined", zap.String("engine_id", m.EngineID), zap.String("role", m.Role),
				zap.String("url", e.url), zap.String("incarnation", m.Incarnation))
		}
		if e.role == rolePrefill {
			next.prefill = append(next.prefill, e)
		} else {
			next.decode = append(next.decode, e)
		}
		next.all = append(next.all, e)
	}
	for k, e := range old {
		if !seen[k] {
			p.log.Info("engine left", zap.String("member", k), zap.String("url", e.url))
		}
	}
	p.cur.Store(next)
}

// memberEngine returns the engine of m: the one already known, or a new one.
func (p *Proxy) memberEngine(m Member, old map[string]*engine) (*engine, error) {
	r := roleOf(m.Role)
	if r != rolePrefill && r != roleDecode {
		return nil, fmt.Errorf("role %q: want prefill or decode", m.Role)
	}
	if m.EngineID == "" {
		return nil, fmt.Errorf("no engine id")
	}
	u, err := normalizeURL(m.URL)
	if err != nil {
		return nil, err
	}
	key := m.key()
	if e := old[key]; e != nil && e.url == u {
		return e, nil
	}
	e := &engine{url: u, role: r, member: key, compat: m.CompatHash, healthy: true,
		info: &KVTransferInfo{EngineID: m.EngineID, Role: m.Role, Connector: m.Connector, Model: m.Model,
			SideChannelHost: m.SideChannelHost, SideChannelPort: m.SideChannelPort, TPSize: m.TPSize, PPSize: max(m.PPSize, 1)}}
	if c := normalizeConnector(m.Connector); c != "" && p.connector != "" && c != p.connector {
		e.wrongConnector = c
		p.log.Error("engine out of rotation: it speaks another connector", zap.String("engine_id", m.EngineID),
			zap.String("engine_connector", c), zap.String("proxy_connector", p.connector))
	}
	return e, nil
}
