// Package critbench runs the same batch of requests through the pull and
// the push connector, between one prefill and one decode engine in one
// process, and measures what the engines see: the critical path from
// RequestFinished on prefill to the request's result on decode, and the
// time the engine loops spend inside connector calls. Its benchmarks put
// pull and push side by side in one run, with one harness so the figures
// compare like with like. (examples/disagg measures the same modes through
// the whole serving stack, over HTTP.)
package critbench
