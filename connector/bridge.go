package connector

import (
	"fmt"

	"github.com/gonixl/gonixl/internal/engine"
	"github.com/gonixl/gonixl/internal/stats"
)

// The connectors take this package's types from their users and run on
// the internal machinery; engine.Public is how they get from one to the
// other without this package exporting internals.
func init() {
	engine.Public.Start = func(cfg any, conn engine.Connector) (any, error) {
		c, ok := cfg.(EngineConfig)
		if !ok {
			return nil, fmt.Errorf("%w: %T is not a connector.EngineConfig", conn.ErrInvalid, cfg)
		}
		return start(c, conn)
	}
	engine.Public.Engine = func(e any) *engine.Engine {
		if pe, ok := e.(*Engine); ok && pe != nil {
			return pe.core
		}
		return nil
	}
	engine.Public.Rank = func(cfg any, e *engine.Engine) (engine.Rank, error) {
		c, ok := cfg.(*RankConfig)
		if !ok || c == nil {
			return engine.Rank{}, fmt.Errorf("%w: %T is not a *connector.RankConfig", ErrInvalid, cfg)
		}
		return c.rank(e)
	}
	engine.Public.Stats = func(s stats.Snapshot) any { return statsOf(s) }
	engine.Public.Params = func(e *engine.Engine, id string, blocks []int) any {
		return TransferParams{
			DoRemotePrefill: true, RemoteBlockIDs: append([]int(nil), blocks...),
			RemoteEngineID: e.Config().EngineID, RemoteRequestID: id,
			RemoteHost: e.Host(), RemotePort: e.Port(), TPSize: e.Config().TPSize,
		}
	}
}
