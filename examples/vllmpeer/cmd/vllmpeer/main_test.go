package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestFlags(t *testing.T) {
	assert.EqualError(t, run([]string{"-role", "prefill"}), `-role is "prefill", want pull-prefill, pull-decode, push-prefill or push-decode`)
	assert.EqualError(t, run([]string{"-role", "pull-prefill", "-blocks", "1,x"}), `-blocks: "x" is not a block id`)
	assert.EqualError(t, run([]string{"-role", "pull-prefill", "-agent", "cuda"}), `-agent is "cuda", want nixl or loopback`)
	assert.EqualError(t, run([]string{"-role", "pull-decode", "-agent", "loopback", "-vllm-version", "0", "-layers", "2", "-head-dim", "4", "-num-blocks", "8", "-params", "{}"}),
		"vllmpeer: kv_transfer_params has no remote_block_ids")
	// A prefill nobody reads from ends at its timeout, saying so.
	err := run([]string{"-role", "pull-prefill", "-agent", "loopback", "-vllm-version", "0", "-layers", "2", "-head-dim", "4", "-num-blocks", "8",
		"-prompt", "a b", "-blocks", "1", "-timeout", "50ms"})
	assert.Regexp(t, `^vllmpeer: request vllmpeer-req-0a1b2c3d freed: not within [0-9.]+ms$`, err)
}
