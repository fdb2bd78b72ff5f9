//go:build !nixl

package stack

import (
	"testing"

	"github.com/gonixl/gonixl/nixl"
	"github.com/stretchr/testify/assert"
)

func TestNativeAgentsNeedTheTag(t *testing.T) {
	_, err := NativeAgents("x")
	assert.ErrorIs(t, err, nixl.ErrUnavailable)
	assert.ErrorContains(t, err, "built without -tags nixl")
}
