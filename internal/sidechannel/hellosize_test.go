package sidechannel_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/internal/handshake"
	"github.com/gonixl/gonixl/internal/sidechannel"
)

// The largest frame a client sends is a handshake hello; one with names far
// longer than real ones (a PATH_MAX model path, a 1 KiB engine id) must fit
// well inside the server's default request limit.
func TestLargestHelloFitsDefaultRequestLimit(t *testing.T) {
	compat := handshake.Compat{
		Version: handshake.Version,
		Model:   "/" + strings.Repeat("m", 4095),
		DType:   strings.Repeat("d", 64),
		Layout:  strings.Repeat("l", 64),
		Mode:    handshake.ModePush,
	}
	b, err := sidechannel.Encode(handshake.Hello{EngineID: strings.Repeat("e", 1024), Compat: compat, Hash: compat.Hash()})
	require.NoError(t, err)
	t.Logf("largest hello: %d bytes, limit %d", len(b), sidechannel.DefaultMaxRequestFrame)
	assert.Less(t, 8*len(b), sidechannel.DefaultMaxRequestFrame)
}
