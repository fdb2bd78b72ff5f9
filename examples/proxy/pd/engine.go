package pd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// KVTransferInfo is an engine's answer to GET /kv_transfer_info.
type KVTransferInfo struct {
	EngineID        string `json:"engine_id"`
	Role            string `json:"role"`
	Connector       string `json:"connector"`
	Model           string `json:"model"`
	SideChannelHost string `json:"side_channel_host"`
	SideChannelPort int    `json:"side_channel_port"`
	TPSize          int    `json:"tp_size"`
	PPSize          int    `json:"pp_size"`
	BlockSize       int    `json:"block_size"`
	// KVGeometry is what decides whether a prefill and a decode engine can
	// exchange KV (geometry.go); nil from engines that do not report it
	// (vLLM, older engines), which are not compared.
	KVGeometry *KVGeometry `json:"kv_geometry,omitempty"`
}

type role int

const (
	rolePrefill role = iota
	roleDecode
)

func (r role) String() string {
	if r == rolePrefill {
		return "prefill"
	}
	return "decode"
}

// engine is one upstream engine and what the proxy knows about it.
type engine struct {
	url         string
	role        role
	outstanding atomic.Int64
	// announces: the engine said, with a 103 answer, that it took a decode leg in
	// (TakenInHeader), so a connection it closes before saying so read nothing.
	announces atomic.Bool

	// Set for engines from SetMembers: they are known by member key, and a
	// new incarnation is a new engine. compat "" (static engines) pairs with
	// any engine.
	member string
	compat string

	mu             sync.Mutex
	healthy        bool            // in rotation by its health checks: one passed since the last HealthFailures failed in a row
	failedChecks   int             // health checks failed in a row
	suspect        bool            // a request could not reach it since that check
	info           *KVTransferInfo // last good GET /kv_transfer_info, nil if none yet
	wrongConnector string          // non-empty: the engine speaks another connector than the proxy
	wrongRole      string          // non-empty: the engine reports the other role
	lastHealthErr  error           // the last GET /health's error, nil if it passed
	// slowOnly: out of rotation only because its health checks timed out (it
	// answered none in time, refused none); ever passed one. pick falls back
	// on such engines when no other is usable: a host busy enough to miss
	// HealthFailures checks in a row is still serving, and an answer that
	// comes late beats a 503 for every request (Envoy's panic threshold).
	slowOnly   bool
	passedOnce bool
}

// whyOut says why the engine is not in rotation under connector conn, from what its
// checks found; "" if it is in rotation.
func (e *engine) whyOut(conn string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.wrongRole != "":
		return fmt.Sprintf("it reports role %q; check -prefill and -decode", e.wrongRole)
	case e.wrongConnector != "":
		return fmt.Sprintf("it speaks connector %q, the proxy %q", e.wrongConnector, conn)
	case !e.healthy && e.lastHealthErr != nil:
		return e.lastHealthErr.Error()
	case !e.healthy:
		return "no health check passed yet"
	case e.suspect:
		return "a request could not reach it since its last health check"
	case conn == "push" && e.role == rolePrefill && e.info == nil:
		return "no answer to GET /kv_transfer_info yet (push needs its side channel)"
	case conn == "":
		return "no connector reported yet"
	}
	return ""
}

// whyNotInRotation names pool's engines not in rotation, each with why.
func (p *Proxy) whyNotInRotation(pool []*engine) []string {
	var out []string
	for _, e := range pool {
		if why := e.whyOut(p.connector); why != "" {
			out = append(out, fmt.Sprintf("%s %s: %s", e.role, e.url, why))
		}
	}
	return out
}

func (e *engine) acquire() (release func()) {
	e.outstanding.Add(1)
	var once sync.Once
	return func() { once.Do(func() { e.outstanding.Add(-1) }) }
}

func (e *engine) kvInfo() *KVTransferInfo {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.info
}

// markDown takes the engine out of rotation until the next health check passes. A
// failure seen by a request alone never empties a pool: pick falls back on suspect
// engines when no other is in rotation (as Envoy's panic threshold does), so one
// transient error on a loaded host does not turn into 503s until the next check.
func (e *engine) markDown() {
	e.mu.Lock()
	e.suspect = true
	e.mu.Unlock()
}

// normalizeConnector maps what engines report ("pull", "NixlConnector", "push",
// "NixlPushConnector", ...) to "pull" or "push"; "" if unknown.
func normalizeConnector(s string) string {
	l := strings.ToLower(strings.TrimSpace(s))
	switch {
	case l == "":
		return ""
	case strings.Contains(l, "push"):
		return "push"
	case strings.Contains(l, "pull"), l == "nixlconnector", l == "nixl":
		return "pull"
	}
	return l
}

// inRotation says whether the engine may get requests under connector conn.
func (e *engine) inRotation(conn string) bool {
	return e.usable(conn, inRotationOnly)
}

// How far pick reaches when no engine in rotation is left: usable's level.
const (
	inRotationOnly = iota // healthy and not suspect
	suspectOK             // also an engine only a request's failure took out
	slowOK                // also one out only because its health checks timed out
)

// usable is inRotation at level inRotationOnly; the higher levels also take the
// engines that only a request's failure (suspectOK) or only slow health checks
// (slowOK) took out.
func (e *engine) usable(conn string, level int) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	healthy := e.healthy || (level >= slowOK && e.slowOnly)
	if !healthy || (e.suspect && level < suspectOK) || e.wrongConnector != "" || e.wrongRole != "" {
		return false
	}
	// Push needs the prefill engine's side-channel coordinates.
	if conn == "push" && e.role == rolePrefill && e.info == nil {
		return false
	}
	return true
}

// check runs GET /health and GET /kv_transfer_info against the engine and updates its
// state. conn is the proxy's connector ("" while it is still being discovered).
func (p *Proxy) check(ctx context.Context, e *engine, conn string) {
	healthErr := p.getHealth(ctx, e)
	var info *KVTransferInfo
	var infoErr error
	if healthErr == nil {
		info, infoErr = p.getInfo(ctx, e)
	}
	e.mu.Lock()
	wasHealthy, wasIn := e.healthy && !e.suspect, e.healthy
	wasWrong, wasWrongRole := e.wrongConnector, e.wrongRole
	e.lastHealthErr = healthErr
	if healthErr == nil {
		e.healthy, e.suspect, e.failedChecks, e.passedOnce, e.slowOnly = true, false, 0, true, false
	} else {
		// A timeout after a pass is a slow engine until a check finds it
		// refusing or failing; any other failure ends slowOnly.
		e.slowOnly = e.passedOnce && isTimeout(healthErr) && (e.failedChecks == 0 || e.slowOnly)
		// Hysteresis: one failed check on a busy host (a slow answer) does not take the
		// engine out; HealthFailures in a row do.
		e.failedChecks++
		if e.failedChecks >= p.cfg.HealthFailures {
			e.healthy = false
		}
	}
	failed, stillIn := e.failedChecks, e.healthy
	if info != nil {
		e.info = info
		if c := normalizeConnector(info.Connector); conn != "" && c != "" && c != conn {
			e.wrongConnector = c
		} else {
			e.wrongConnector = ""
		}
		e.wrongRole = ""
		if roleOf(info.Role) == otherRole(e.role) {
			e.wrongRole = info.Role
		}
	}
	wrong, wrongRole := e.wrongConnector, e.wrongRole
	e.mu.Unlock()

	log := p.log.With(zap.String("engine", e.url), zap.Stringer("role", e.role))
	switch {
	case healthErr != nil && stillIn:
		log.Warn("engine health check failed; it stays in rotation until it fails more in a row",
			zap.Int("failed_in_a_row", failed), zap.Int("leaves_rotation_after", p.cfg.HealthFailures), zap.Error(healthErr))
	case healthErr != nil && wasIn:
		log.Warn("engine out of rotation: health checks failed in a row", zap.Int("failed_in_a_row", failed), zap.Error(healthErr))
	case healthErr == nil && !wasHealthy:
		log.Info("engine passed health check")
	}
	if infoErr != nil {
		log.Debug("GET /kv_transfer_info failed", zap.Error(infoErr))
	}
	// Said once when it starts, not at every check: a misconfigured engine is checked every
	// second while the proxy waits at start, and every HealthInterval after.
	if wrong != "" && wrong != wasWrong {
		log.Error("engine out of rotation: it speaks another connector",
			zap.String("engine_connector", wrong), zap.String("proxy_connector", conn))
	}
	if wrongRole != "" && wrongRole != wasWrongRole {
		log.Error("engine out of rotation: it reports the other role; check -prefill and -decode",
			zap.String("engine_role", wrongRole))
	}
}

// isTimeout says whether a health check failed by running out of time (the
// engine did not answer soon enough) rather than by an answer or a refusal.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// roleOf maps a reported role to ours; -1 for unknown or both ("kv_both").
func roleOf(s string) role {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "prefill", "producer", "kv_producer":
		return rolePrefill
	case "decode", "consumer", "kv_consumer":
		return roleDecode
	}
	return -1
}

func otherRole(r role) role {
	if r == rolePrefill {
		return roleDecode
	}
	return rolePrefill
}

func (p *Proxy) getHealth(ctx context.Context, e *engine) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.url+"/health", nil)
	if err != nil {
		return err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s/health: status %d", e.url, resp.StatusCode)
	}
	return nil
}

func (p *Proxy) getInfo(ctx context.Context, e *engine) (*KVTransferInfo, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.url+"/kv_transfer_info", nil)
	if err != nil {
		return nil, err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s/kv_transfer_info: status %d", e.url, resp.StatusCode)
	}
	var info KVTransferInfo
	if err := json.Unmarshal(body, &info); err != nil {
		return nil, fmt.Errorf("GET %s/kv_transfer_info: %w", e.url, err)
	}
	return &info, nil
}

// checkAll checks every engine concurrently and returns when all are done.
func (p *Proxy) checkAll(ctx context.Context, conn string) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.HealthTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, e := range p.pools().all {
		wg.Go(func() { p.check(ctx, e, conn) })
	}
	if p.render != nil {
		for _, rs := range p.render.servers {
			wg.Go(func() { p.checkRender(ctx, rs) })
		}
	}
	wg.Wait()
	p.logGeometry()
}

func (p *Proxy) healthLoop(ctx context.Context) {
	t := time.NewTicker(p.cfg.HealthInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.checkAll(ctx, p.connector)
		}
	}
}

// compatible says whether a prefill and a decode engine may be paired: their
// compatibility hashes agree, or one is not known (a static engine), and the KV
// geometries they report agree (geometry.go).
func compatible(a, b *engine) bool {
	return compatibleHash(a, b) && sameGeometry(a, b)
}

// compatibleHash is compatible by the registry's compatibility hashes alone.
func compatibleHash(a, b *engine) bool {
	return a.compat == "" || b.compat == "" || a.compat == b.compat
}

// pick chooses an engine of pool in rotation, accepted by accept (if not nil) and not in
// exclude, by policy; nil if none. The caller must call the returned release when the leg
// is over.
func (p *Proxy) pick(pool []*engine, rr *atomic.Uint64, policy string, accept func(*engine) bool, exclude ...*engine) (*engine, func()) {
	cands := make([]*engine, 0, len(pool))
	for _, level := range []int{inRotationOnly, suspectOK, slowOK} {
	outer:
		for _, e := range pool {
			for _, x := range exclude {
				if x == e {
					continue outer
				}
			}
			if e.usable(p.connector, level) && (accept == nil || accept(e)) {
				cands = append(cands, e)
			}
		}
		if len(cands) > 0 {
			break
		}
	}
	if len(cands) == 0 {
		return nil, nil
	}
	start := int((rr.Add(1) - 1) % uint64(len(cands)))
	chosen := cands[start]
	if policy == PolicyLeastOutstanding {
		best := chosen.outstanding.Load()
		for i := 1; i < len(cands); i++ {
			e := cands[(start+i)%len(cands)]
			if n := e.outstanding.Load(); n < best {
				chosen, best = e, n
			}
		}
	}
	return chosen, chosen.acquire()
}

// inRotationCount counts pool's engines in rotation.
func (p *Proxy) inRotationCount(pool []*engine) int {
	n := 0
	for _, e := range pool {
		if e.inRotation(p.connector) {
			n++
		}
	}
	return n
}
