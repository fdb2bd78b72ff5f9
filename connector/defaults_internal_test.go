package connector

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gonixl/gonixl/internal/engine"
	"github.com/gonixl/gonixl/internal/staging"
)

// The defaults this package documents are the ones the machinery applies.
func TestDefaultsAreTheMachinerys(t *testing.T) {
	assert.Equal(t, engine.DefaultHandshakeTimeout, DefaultHandshakeTimeout)
	assert.Equal(t, staging.DefaultDescCost, DefaultDescCost)
	assert.Equal(t, staging.DefaultVRAMCopyBandwidth, float64(DefaultVRAMCopyBandwidth))
	assert.Equal(t, staging.DefaultDRAMCopyBandwidth, float64(DefaultDRAMCopyBandwidth))
	assert.Equal(t, staging.Mode(StagingOn), staging.ModeOn)
	assert.Equal(t, staging.Mode(StagingAuto), staging.ModeAuto)
	assert.Equal(t, staging.Mode(StagingOff), staging.ModeOff)
}
