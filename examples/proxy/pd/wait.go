package pd

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"
)

// waitLogEvery is how often the start wait says again what it waits for.
const waitLogEvery = 10 * time.Second

// waitEngines waits up to cfg.StartWait for the static engines to be ready (startReady):
// engines started in any order, or after the proxy, then work without a restart of the
// proxy. Its give-up is an error naming each engine not in rotation and why, as New's
// caller will exit with it. With no wait, or no static engine of a role, it returns at once.
func (p *Proxy) waitEngines(ctx context.Context) error {
	if p.cfg.StartWait <= 0 || len(p.static.prefill) == 0 || len(p.static.decode) == 0 {
		return nil
	}
	start := time.Now()
	deadline := start.Add(p.cfg.StartWait)
	period := min(max(p.cfg.HealthInterval, 20*time.Millisecond), time.Second)
	var lastLog time.Time
	for {
		ready, err := p.startReady(ctx)
		if err != nil {
			return err
		}
		if ready {
			if !lastLog.IsZero() {
				p.log.Info("engines ready", zap.Duration("waited", time.Since(start).Round(time.Millisecond)))
			}
			return nil
		}
		if time.Now().After(deadline) {
			missing := p.notInRotation(ctx)
			why := "not in rotation: " + strings.Join(missing, "; ")
			var geometry []string // engines in rotation that cannot be paired
			for _, m := range p.geometryMismatches(p.static.prefill, p.static.decode, true) {
				geometry = append(geometry, m.String())
			}
			if len(geometry) > 0 {
				why += "; KV geometry: " + strings.Join(geometry, "; ")
			}
			p.log.Error("gave up waiting for the engines", zap.Duration("waited", p.cfg.StartWait), zap.Strings("not_in_rotation", missing),
				zap.Strings("kv_geometry_differs", geometry))
			return fmt.Errorf("pd: gave up after %s waiting for a prefill and a decode engine that may be paired (%s); start the engines, or wait longer (Config.StartWait, -wait-engines)",
				p.cfg.StartWait, why)
		}
		if lastLog.IsZero() || time.Since(lastLog) >= waitLogEvery {
			msg := "waiting for the engines"
			if !lastLog.IsZero() {
				msg = "still waiting for the engines"
			}
			lastLog = time.Now()
			p.log.Info(msg, zap.Duration("waited", time.Since(start).Round(time.Millisecond)), zap.Duration("gives_up_after", p.cfg.StartWait),
				zap.Int("prefill_in_rotation", p.inRotationCount(p.static.prefill)), zap.Int("decode_in_rotation", p.inRotationCount(p.static.decode)),
				zap.Strings("not_in_rotation", p.whyNotInRotation(p.static.all)))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pd: stopped waiting for the engines: %w", context.Cause(ctx))
		case <-time.After(period):
		}
		p.checkAll(ctx, p.connector)
	}
}

// startReady says whether the proxy may serve: it knows its connector (or an engine just
// reported it) and a prefill engine in rotation has a decode partner in rotation. Engines
// that disagree on the connector are an error, as in New.
func (p *Proxy) startReady(ctx context.Context) (bool, error) {
	if p.connector == "" {
		found := false
		for _, e := range p.static.all {
			if info := e.kvInfo(); info != nil && normalizeConnector(info.Connector) != "" {
				found = true
			}
		}
		if !found {
			return false, nil
		}
		conn, err := p.discoverConnector()
		if err != nil {
			return false, err
		}
		p.connector = conn
		p.checkAll(ctx, conn) // engines of another connector leave rotation
	}
	for _, e := range p.static.prefill {
		if e.inRotation(p.connector) && p.hasPartner(p.static.decode, e) {
			return true, nil
		}
	}
	return false, nil
}

// notInRotation names the static engines not in rotation, each with its health check's
// answer now.
func (p *Proxy) notInRotation(ctx context.Context) []string {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var out []string
	for _, e := range p.static.all {
		if e.inRotation(p.connector) {
			continue
		}
		why := "no connector reported"
		if err := p.getHealth(ctx, e); err != nil {
			why = err.Error()
		} else if p.connector != "" {
			why = "healthy, but another connector or role, or no /kv_transfer_info"
		}
		out = append(out, fmt.Sprintf("%s %s: %s", e.role, e.url, why))
	}
	return out
}
