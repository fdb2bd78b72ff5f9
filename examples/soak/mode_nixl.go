//go:build nixl

package main

// Built with -tags nixl the soak runs the stack as users run it: separate
// processes, NIXL agents.
const defaultMode, nixlBuild = modeProcess, true
