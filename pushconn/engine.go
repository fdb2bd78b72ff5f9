package pushconn

import (
	"net"
	"strconv"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/internal/engine"
	"github.com/gonixl/gonixl/internal/handshake"
)

// pushEngine is a push engine as its ranks see it: the shared engine,
// marked as push so that a pull rank refuses it.
type pushEngine struct {
	core *engine.Engine
}

// NewEngine validates cfg and starts the side channel of a push engine,
// the Engine of this package's Producers and Consumers. It serves this
// engine's handshake payload (every rank's agent metadata and layout, in
// push mode) and fetches peer engines' payloads, once per peer.
func NewEngine(cfg connector.EngineConfig) (*connector.Engine, error) {
	e := &pushEngine{}
	pub, core, err := engine.StartPublic[*connector.Engine](cfg, engine.Connector{Name: "pushconn", Mode: handshake.ModePush, ErrInvalid: errInvalid, ErrClosed: errClosed, State: e})
	e.core = core
	return pub, err
}

// engineOf returns the push state of e, or an error naming what is wrong
// with it.
func engineOf(e *connector.Engine) (*pushEngine, error) {
	return engine.StateOf[*pushEngine](e, "pushconn", errInvalid)
}

// Coordinates returns how a decode engine reaches prefill engine e (made
// by NewEngine): what the proxy hands to Consumer.Register before prefill
// runs.
func Coordinates(e *connector.Engine) Prefill {
	return Prefill{EngineID: e.ID(), Host: e.Host(), Port: e.Port(), TPSize: e.Geometry().TPSize, PPSize: max(e.Geometry().PPSize, 1)}
}

func (e *pushEngine) ID() string   { return e.core.Config().EngineID }
func (e *pushEngine) Host() string { return e.core.Host() }
func (e *pushEngine) Port() int    { return e.core.Port() }
func (e *pushEngine) TPSize() int  { return e.core.Config().TPSize }

// PPSize returns the engine's pipeline-parallel size (1 without).
func (e *pushEngine) PPSize() int { return e.core.Config().PPSize }

func (e *pushEngine) addr(host string, port int) string {
	return net.JoinHostPort(host, strconv.Itoa(port))
}
