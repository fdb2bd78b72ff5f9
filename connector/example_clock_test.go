package connector_test

import (
	"fmt"
	"time"

	"github.com/gonixl/gonixl/connector"
)

// A test steps a ManualClock to make a lease run out without sleeping.
func ExampleManualClock() {
	c := connector.NewManualClock(time.Unix(1000, 0))
	deadline := c.Now().Add(30 * time.Second)
	c.Advance(31 * time.Second)
	fmt.Println(c.Now().After(deadline))
	c.Advance(-time.Hour) // ignored
	fmt.Println(c.Now().Unix())
	// Output:
	// true
	// 1031
}
