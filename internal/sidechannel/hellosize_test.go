package sidechannel_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/internal/handshake"
	"github.com/gonixl/gonixl/internal/notif"
	"github.com/gonixl/gonixl/internal/sidechannel"
)

// The largest frame a client sends is a hello: a hold query listing
// handshake.MaxExtendIDs ids of notif.MaxIDLen bytes, with names far longer
// than real ones (a PATH_MAX model path, a 1 KiB engine id). It must fit the
// server's default request limit, with little to spare (the limit is what
// a hello can be, not more).
func TestLargestHelloFitsDefaultRequestLimit(t *testing.T) {
	compat := handshake.Compat{
		Version: handshake.Version,
		Model:   "/" + strings.Repeat("m", 4095),
		DType:   strings.Repeat("d", 64),
		Layout:  strings.Repeat("l", 64),
		Mode:    handshake.ModePull,
	}
	h := handshake.Hello{EngineID: strings.Repeat("e", 1024), Compat: compat, Hash: compat.Hash()}
	b, err := sidechannel.Encode(h)
	require.NoError(t, err)
	t.Logf("largest handshake hello: %d bytes", len(b))
	assert.Less(t, len(b), 8<<10)

	id := strings.Repeat("r", notif.MaxIDLen)
	for range handshake.MaxExtendIDs {
		h.Extend = append(h.Extend, id)
	}
	b, err = sidechannel.Encode(h)
	require.NoError(t, err)
	t.Logf("largest hold query: %d bytes, limit %d", len(b), sidechannel.DefaultMaxRequestFrame)
	assert.LessOrEqual(t, len(b), sidechannel.DefaultMaxRequestFrame)
	assert.Greater(t, len(b), sidechannel.DefaultMaxRequestFrame*9/10, "the limit is not far above the largest hello")
}
