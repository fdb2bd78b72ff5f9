package main

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// randomPrompts returns n prompts of inputLen words each, as `vllm bench
// serve --dataset-name random` makes prompts of random tokens: the engine's
// tokenizer makes one token of each word, so a prompt is exactly inputLen
// tokens there (a real model's tokenizer makes about that many). Each prompt
// starts with its own index, so no two share a prefix and no prefix cache
// can serve one from another.
func randomPrompts(n, inputLen int, seed uint64) []string {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	out := make([]string, n)
	var b strings.Builder
	for i := range out {
		b.Reset()
		fmt.Fprintf(&b, "p%d-%d", seed, i)
		for range inputLen - 1 {
			fmt.Fprintf(&b, " w%d", rng.IntN(100000))
		}
		out[i] = b.String()
	}
	return out
}
