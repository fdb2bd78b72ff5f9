package connector

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gonixl/gonixl/internal/engine"
	"github.com/gonixl/gonixl/internal/staging"
	"github.com/gonixl/gonixl/internal/staging/gpucopy"
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

// A GPUCopier reaches the staging machinery as the kernel's own copier,
// so that the connectors use its block kernel and keep polling while it
// runs; a caller's Copier reaches it as is, and none means none.
func TestStagingHandsCopiersOver(t *testing.T) {
	inner := &gpucopy.Copier{}
	got := Staging{Mode: StagingOn, Copier: &GPUCopier{c: inner}}.internal()
	assert.Same(t, inner, got.Copier)
	_, progress := got.Copier.(staging.ProgressCopier)
	assert.True(t, progress, "the GPU copier keeps the rank's transfers progressing while it copies")

	var mine staging.HostCopier
	assert.Equal(t, staging.Copier(mine), Staging{Copier: mine}.internal().Copier)
	assert.Nil(t, Staging{}.internal().Copier)
	var nilGPU *GPUCopier
	assert.Nil(t, Staging{Copier: nilGPU}.internal().Copier, "a nil *GPUCopier is no copier, not a typed nil")
}
