package main

import (
	"fmt"

	"github.com/gonixl/gonixl/examples/engine/server"
)

// modelOf returns the -model shape the stack runs: demo-4l (one group of
// full attention), or the engine's grouped demo presets, swa-demo (full
// attention beside sliding-window layers) and hybrid-demo (attention beside
// Mamba2 state), whose groups the connectors move with their grouped calls.
func modelOf(name string) (server.ModelSpec, server.ComputeModel, error) {
	switch name {
	case "", demoModel.Name:
		return demoModel, demoCompute, nil
	case "swa-demo", "hybrid-demo":
		m, c, _ := server.Preset(name)
		return m, c, nil
	}
	return server.ModelSpec{}, server.ComputeModel{}, fmt.Errorf("-model is %q, want %s, swa-demo or hybrid-demo", name, demoModel.Name)
}
