package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseParams(t *testing.T) {
	p, err := parseParams("")
	require.NoError(t, err)
	assert.Nil(t, p)
	p, err = parseParams("ucx_error_handling_mode=none, num_workers=2")
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"ucx_error_handling_mode": "none", "num_workers": "2"}, p)
	_, err = parseParams("nokey")
	assert.EqualError(t, err, `-nixl-backend-params: "nokey" is not key=value`)
}
