package server

import (
	"fmt"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/nixl"
)

// A prefill engine of PPSize pipeline stages runs TPSize x PPSize ranks,
// world rank w being TP rank w % TPSize of stage w / TPSize; each holds its
// stage's layers (descriptors.Geometry.StageLayout) and its Producer
// writes them into decode. The engine loop treats them as it treats TP
// ranks: every one fills its blocks at the end of prefill and finishes
// the request.

// checkPP refuses a pipeline-parallel engine the connectors cannot run.
func (c *Config) checkPP() error {
	switch {
	case c.PPSize < 0:
		return fmt.Errorf("engine: Config.PPSize is %d, want >= 1 (0: 1)", c.PPSize)
	case c.PPSize <= 1:
		return nil
	case c.PPSize > c.Model.Layers:
		return fmt.Errorf("engine: Config.PPSize is %d, more than the model's %d layers", c.PPSize, c.Model.Layers)
	case c.Role != RolePrefill:
		return fmt.Errorf("engine: Config.PPSize is %d with role %q: only a prefill engine may be pipeline-parallel (decode holds every layer)", c.PPSize, c.Role)
	case c.Connector != ConnPush:
		return fmt.Errorf("engine: Config.PPSize is %d with connector %q: pipeline-parallel prefill needs the push connector (pull refuses prefill PP > 1)", c.PPSize, c.Connector)
	case c.Protocol == ProtocolVLLM:
		return fmt.Errorf("engine: Config.PPSize is %d with protocol %q: pipeline-parallel ranks need gonixl's protocol", c.PPSize, c.Protocol)
	}
	return nil
}

// ranks returns how many connector ranks the engine runs: TPSize per
// pipeline stage.
func (c *Config) ranks() int { return c.TPSize * max(c.PPSize, 1) }

// agentName names world rank w's agent: "<engine>-tp<r>", with the stage
// first under pipeline parallelism ("<engine>-pp<s>-tp<r>").
func (c *Config) agentName(w int) string {
	if c.PPSize <= 1 {
		return fmt.Sprintf("%s-tp%d", c.EngineID, w)
	}
	return fmt.Sprintf("%s-pp%d-tp%d", c.EngineID, w/c.TPSize, w%c.TPSize)
}

// rankBytes is the KV memory world rank w needs.
func (c *Config) rankBytes(g descriptors.Geometry, w int) uint64 {
	if c.PPSize <= 1 {
		return g.RankBytes()
	}
	return g.StageBytes(w / c.TPSize)
}

// rankLayout is world rank w's layout in buf.
func (c *Config) rankLayout(g descriptors.Geometry, w int, buf nixl.Desc) (descriptors.Layout, error) {
	if c.PPSize <= 1 {
		return g.Layout(nixl.DRAM, w, buf)
	}
	return g.StageLayout(nixl.DRAM, w/c.TPSize, w%c.TPSize, buf)
}
