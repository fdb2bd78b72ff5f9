//go:build !nixl

package nixl_test

import (
	"errors"
	"fmt"

	"github.com/gonixl/gonixl/nixl"
)

// Built without the nixl tag, the native agent is a stub whose constructor
// says so; programs fall back to the loopback agent (nixl/loopback).
func ExampleNew() {
	_, err := nixl.New("prefill-0", nixl.Config{})
	fmt.Println(errors.Is(err, nixl.ErrUnavailable))
	// Output: true
}
