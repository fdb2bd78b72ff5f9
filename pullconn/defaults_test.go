package pullconn

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/internal/engine"
)

// The public defaults spell out their values (go doc shows them); the
// shared engine must agree.
func TestDefaultsAgreeWithTheSharedEngine(t *testing.T) {
	assert.Equal(t, engine.DefaultLease, connector.DefaultLease)
	assert.Equal(t, engine.DefaultHandshakeTimeout, connector.DefaultHandshakeTimeout)
	assert.Equal(t, engine.DefaultPollInterval, connector.DefaultPollInterval)
	assert.Equal(t, engine.DefaultIdleInterval, connector.DefaultIdleInterval)
	assert.Equal(t, engine.DefaultStatsInterval, connector.DefaultStatsInterval)
}
