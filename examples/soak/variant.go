package main

import (
	"fmt"
	"strconv"

	"github.com/gonixl/gonixl/examples/engine/server"
)

// The stacks a soak can run, by the name -connectors takes: the two
// connectors, and push with progressive push (the prefill engine computes
// prompts in chunks and reports each chunk's blocks layer by layer, so
// both the chunk and the per-layer paths of the writer move KV while
// prefill computes, through kills, restarts and idle gaps).
const (
	stackPull            = "pull"
	stackPush            = "push"
	stackPushProgressive = "push-progressive"
)

// progressChunk is push-progressive's chunk in tokens: one block of the
// qwen2.5-7b preset (16 tokens), so the soak's prompts (1 to 48 tokens,
// more with a chat template) report up to a few chunks, each per layer.
const progressChunk = 16

// stackNames lists what -connectors takes, for its error.
var stackNames = []string{stackPull, stackPush, stackPushProgressive}

// checkStack returns an error naming a stack -connectors does not know.
func checkStack(name string) error {
	for _, s := range stackNames {
		if name == s {
			return nil
		}
	}
	return fmt.Errorf("-connectors: %q is not one of %v", name, stackNames)
}

// connectorOf returns the connector a stack's engines and proxy run.
func connectorOf(name string) string {
	if name == stackPushProgressive {
		return stackPush
	}
	return name
}

// progressive sets a prefill engine of stack name to report progress.
func progressive(name, role string, c *server.Config) {
	if name == stackPushProgressive && role == partPrefill {
		c.ProgressChunk, c.ProgressLayers = progressChunk, true
	}
}

// progressiveArgs are the engine program's flags progressive sets.
func progressiveArgs(name, role string) []string {
	if name == stackPushProgressive && role == partPrefill {
		return []string{"-progress-chunk", strconv.Itoa(progressChunk), "-progress-layers"}
	}
	return nil
}
