package main

import "github.com/gonixl/gonixl/examples/completions"

// sample is one request as the client saw it.
type sample = completions.Sample
