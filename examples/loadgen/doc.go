// Package loadgen issues benchmark requests at a target rate: an open-loop
// generator (arrivals do not wait for earlier requests to finish, like
// clients hitting a server), with fixed or Poisson inter-arrival times. The
// pull and push benchmarks share it so their figures come from the same
// arrival process.
package loadgen
