package pd

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	"go.uber.org/zap"
)

// KVGeometry is the KV-cache geometry an engine reports on GET
// /kv_transfer_info (examples/engine/server.KVGeometry): what a prefill and
// a decode engine must share to exchange KV. Block size and TP size are not
// in it: the connectors map them.
type KVGeometry struct {
	Layers     int       `json:"layers"`
	KVHeads    int       `json:"kv_heads"`
	HeadDim    int       `json:"head_dim"`
	DType      string    `json:"dtype"`
	DTypeBytes int       `json:"dtype_bytes"`
	MLA        bool      `json:"mla"`
	KVPacked   bool      `json:"kv_packed"`
	Groups     []KVGroup `json:"groups,omitempty"`
}

// KVGroup is one KV-cache group of a KVGeometry.
type KVGroup struct {
	Kind   string `json:"kind"`
	Layers int    `json:"layers"`
	Window int    `json:"window,omitempty"`
	Conv   []int  `json:"conv,omitempty"`
	State  int    `json:"state,omitempty"`
}

// geometryDiff names each field in which a prefill engine's geometry p and a
// decode engine's d differ, with both values ("layers: prefill 4, decode
// 2"); nil when they agree or either engine reported none (vLLM, older
// engines: their connectors still refuse a mismatch, with decode's 502).
func geometryDiff(p, d *KVGeometry) []string {
	if p == nil || d == nil {
		return nil
	}
	var out []string
	field := func(name string, a, b any) {
		if fmt.Sprint(a) != fmt.Sprint(b) {
			out = append(out, fmt.Sprintf("%s: prefill %v, decode %v", name, a, b))
		}
	}
	field("layers", p.Layers, d.Layers)
	field("kv_heads", p.KVHeads, d.KVHeads)
	field("head_dim", p.HeadDim, d.HeadDim)
	field("dtype", p.DType, d.DType)
	field("dtype_bytes", p.DTypeBytes, d.DTypeBytes)
	field("mla", p.MLA, d.MLA)
	field("kv_packed", p.KVPacked, d.KVPacked)
	if len(p.Groups) != len(d.Groups) {
		field("groups", len(p.Groups), len(d.Groups))
		return out
	}
	for i := range p.Groups {
		a, b := p.Groups[i], d.Groups[i]
		name := fmt.Sprintf("groups[%d].", i)
		field(name+"kind", a.Kind, b.Kind)
		field(name+"layers", a.Layers, b.Layers)
		field(name+"window", a.Window, b.Window)
		field(name+"conv", a.Conv, b.Conv)
		field(name+"state", a.State, b.State)
	}
	return out
}

// geometry returns the KV geometry the engine reported last, nil if none.
func (e *engine) geometry() *KVGeometry {
	if info := e.kvInfo(); info != nil {
		return info.KVGeometry
	}
	return nil
}

// engineID returns the engine id the engine reported last, "" if none.
func (e *engine) engineID() string {
	if info := e.kvInfo(); info != nil {
		return info.EngineID
	}
	return ""
}

// sameGeometry says whether a and b (one prefill, one decode engine, in
// either order) may exchange KV as far as their reported geometries tell.
func sameGeometry(a, b *engine) bool { return len(geometryDiff(a.geometry(), b.geometry())) == 0 }

// name is how messages name the engine: role, URL and, once known, its id.
func (e *engine) name() string {
	if id := e.engineID(); id != "" {
		return fmt.Sprintf("%s engine %s (%q)", e.role, e.url, id)
	}
	return fmt.Sprintf("%s engine %s", e.role, e.url)
}

// geometryPair is a prefill and a decode engine whose geometries differ.
type geometryPair struct {
	pe, de *engine
	differ []string
}

func (g geometryPair) String() string {
	return fmt.Sprintf("%s and %s differ in KV geometry (%s)", g.pe.name(), g.de.name(), strings.Join(g.differ, "; "))
}

// geometryMismatches returns the pairs of prefill and decode whose
// geometries differ and that would otherwise be paired (compatibility hashes
// agree); with usableOnly, only pairs of engines that may get requests.
func (p *Proxy) geometryMismatches(prefill, decode []*engine, usableOnly bool) []geometryPair {
	var out []geometryPair
	for _, pe := range prefill {
		if usableOnly && !pe.usable(p.connector, suspectOK) {
			continue
		}
		for _, de := range decode {
			if usableOnly && !de.usable(p.connector, suspectOK) || !compatibleHash(pe, de) {
				continue
			}
			if d := geometryDiff(pe.geometry(), de.geometry()); len(d) > 0 {
				out = append(out, geometryPair{pe, de, d})
			}
		}
	}
	return out
}

// geometryError is the answer to a request that no pair can serve because
// the engines in rotation differ in KV geometry; nil if that is not why.
// It is a 502: the engines are deployed wrong, nothing in the request is.
func (p *Proxy) geometryError(prefill, decode []*engine) *legError {
	ms := p.geometryMismatches(prefill, decode, true)
	if len(ms) == 0 {
		return nil
	}
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = m.String()
	}
	return &legError{status: http.StatusBadGateway, msg: strings.Join(parts, "; ") +
		": they cannot exchange KV, and no prefill and decode engine in rotation agree; start both engines with the same model (the proxy sent this request to neither)"}
}

// geometryLogged remembers which pairs' mismatches were logged, so that each is
// said once, not at every health check.
type geometryLogged struct {
	mu     sync.Mutex
	logged map[[2]*engine]string // prefill, decode -> the differences logged
}

// logGeometry compares every prefill and decode engine the proxy knows, after
// their /kv_transfer_info was read again: a pair that differs is logged once,
// at error level, naming both engines and each field with both values, and
// again only if it changes; a pair that agrees again (an engine restarted
// with the right model) is logged at info level.
func (p *Proxy) logGeometry() {
	pools := p.pools()
	p.geoLog.mu.Lock()
	defer p.geoLog.mu.Unlock()
	now := map[[2]*engine]string{}
	for _, m := range p.geometryMismatches(pools.prefill, pools.decode, false) {
		k, d := [2]*engine{m.pe, m.de}, strings.Join(m.differ, "; ")
		now[k] = d
		if p.geoLog.logged[k] != d {
			p.log.Error("prefill and decode engines differ in KV geometry: no request goes to this pair",
				zap.String("prefill", m.pe.url), zap.String("prefill_engine_id", m.pe.engineID()),
				zap.String("decode", m.de.url), zap.String("decode_engine_id", m.de.engineID()), zap.Strings("differ", m.differ))
		}
	}
	for k := range p.geoLog.logged {
		if _, still := now[k]; !still && slices.Contains(pools.prefill, k[0]) && slices.Contains(pools.decode, k[1]) &&
			k[0].geometry() != nil && k[1].geometry() != nil {
			p.log.Info("prefill and decode engines agree on KV geometry again",
				zap.String("prefill", k[0].url), zap.String("prefill_engine_id", k[0].engineID()),
				zap.String("decode", k[1].url), zap.String("decode_engine_id", k[1].engineID()))
		}
	}
	p.geoLog.logged = now
}
