package main

import "github.com/gonixl/gonixl/examples/stack"

// stackConfig is what one demo stack runs.
type stackConfig = stack.Config

// demoStack is a stack.Stack with the demo's agents.
type demoStack struct {
	*stack.Stack
	agentKind   string
	closeAgents func()
}

// startStack starts a stack whose agents are this build's (loopback agents
// on cfg.Link, or NIXL agents under -tags nixl).
func startStack(cfg stackConfig) (*demoStack, error) {
	newAgent, closeAgents, kind, err := agents(cfg.Link)
	if err != nil {
		return nil, err
	}
	cfg.NewAgent = newAgent
	s, err := stack.Start(cfg)
	if err != nil {
		closeAgents()
		return nil, err
	}
	return &demoStack{Stack: s, agentKind: kind, closeAgents: closeAgents}, nil
}

func (s *demoStack) url() string { return s.URL() }

// close stops the stack, then the agents' fabric.
func (s *demoStack) close() error {
	err := s.Close()
	if s.closeAgents != nil {
		s.closeAgents()
		s.closeAgents = nil
	}
	return err
}
