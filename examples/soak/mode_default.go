//go:build !nixl

package main

// Without NIXL, loopback agents cannot cross processes: the stack runs in
// the soak's process, over real HTTP.
const defaultMode, nixlBuild = modeInproc, false
