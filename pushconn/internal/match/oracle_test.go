package match

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/internal/oracle"
)

// Base strips what vLLM's get_base_request_id strips (nixl/utils.py), on
// every edge of the "-<8 hex>" rule.
func TestOracleBaseID(t *testing.T) {
	ids := []string{"abc-0123abcd", "cmpl-x-1234ABCD", "plain", "-0123abcd", "abc-0123abc", "abc-0123abcdE",
		"abc_0123abcd", "abc-0123abcg", "a-b-c-deadbeef-deadbeef", "模型-0123abcd", "abc--0123abcd", ""}
	lines := oracle.Run(t, "", append([]string{"base-id", "--"}, ids...)...)
	var got map[string]string
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &got))
	for _, id := range ids {
		assert.Equal(t, got[id], Base(id), "Base(%q)", id)
	}
}
