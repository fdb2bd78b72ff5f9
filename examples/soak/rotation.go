package main

import (
	"fmt"
	"strings"
	"time"
)

// The proxy's series of the engines it sends requests to now, by role
// (examples/proxy/pd/metrics.go).
const inRotationSeries = "gonixl_proxy_engines_in_rotation"

// waitInRotation waits until the proxy at proxyURL reports want engines of
// each role in rotation, within bound. An engine that restarted is back in
// the proxy's rotation only after the proxy's next health check passes (at
// most one health interval after the engine answers again; the engine left
// rotation if HealthFailures checks failed while it was down), so traffic
// that must succeed waits for it, as a user's client would have to.
//
// Scrapes before notBefore do not count: a health check that started before
// the engine came back may still fail and take it out (its third failure
// in a row) after a scrape that saw it in rotation. Pass the restart's end
// plus the proxy's health timeout, by which every such check has ended.
func waitInRotation(proxyURL string, want int, notBefore time.Time, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	if d := time.Until(notBefore); d > 0 {
		time.Sleep(min(d, bound))
	}
	var last string
	for {
		s, err := scrape(proxyURL + "/metrics")
		if err == nil {
			var short []string
			for _, role := range []string{partPrefill, partDecode} {
				if n := s.sum(inRotationSeries, `role="`+role+`"`); n != float64(want) {
					short = append(short, fmt.Sprintf("%s %v of %d", role, n, want))
				}
			}
			if len(short) == 0 {
				return nil
			}
			last = "engines in rotation: " + strings.Join(short, ", ")
		} else {
			last = err.Error()
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("the proxy %s did not report every engine in rotation within %v (%s)", proxyURL, bound, last)
		}
		time.Sleep(min(100*time.Millisecond, time.Until(deadline)))
	}
}
