package pushconn

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gonixl/gonixl/internal/engine"
)

// The public defaults spell out their values (go doc shows them); the
// shared engine must agree.
func TestDefaultsAgreeWithTheSharedEngine(t *testing.T) {
	assert.Equal(t, engine.DefaultLease, DefaultLease)
	assert.Equal(t, engine.DefaultHandshakeTimeout, DefaultHandshakeTimeout)
	assert.Equal(t, engine.DefaultPollInterval, DefaultPollInterval)
	assert.Equal(t, engine.DefaultIdleInterval, DefaultIdleInterval)
	assert.Equal(t, engine.DefaultStatsInterval, DefaultStatsInterval)
}
