package notif

import (
	"encoding/hex"
	"encoding/json"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// The notifications of vLLM's connector version 12 (testdata/vllm/
// notifications.json, written from docs/vllm.md's facts): each encodes to
// its exact bytes and decodes back; each invalid one is refused with the
// error named.
func TestVLLMNotificationVectors(t *testing.T) {
	raw, err := os.ReadFile("../../testdata/vllm/notifications.json")
	require.NoError(t, err)
	type bad struct{ Name, Hex, Error string }
	var v struct {
		Completions []struct {
			Name, ID, Hex string
			N             int
		}
		CompletionsInvalid []bad `json:"completions_invalid"`
		Heartbeats         []struct {
			Name, Hex string
			IDs       []string
		}
		HeartbeatsInvalid []bad `json:"heartbeats_invalid"`
	}
	require.NoError(t, json.Unmarshal(raw, &v))
	require.NotEmpty(t, v.Completions)
	require.NotEmpty(t, v.Heartbeats)
	unhex := func(s string) []byte {
		b, err := hex.DecodeString(s)
		require.NoError(t, err)
		return b
	}
	for _, c := range v.Completions {
		got, err := EncodeCompletion(c.ID, c.N)
		require.NoError(t, err, c.Name)
		require.Equal(t, c.Hex, hex.EncodeToString(got), c.Name)
		back, err := DecodeCompletion(unhex(c.Hex))
		require.NoError(t, err, c.Name)
		require.Equal(t, Completion{ID: c.ID, N: c.N}, back, c.Name)
	}
	for _, c := range v.CompletionsInvalid {
		_, err := DecodeCompletion(unhex(c.Hex))
		require.ErrorIs(t, err, ErrMalformed, c.Name)
		require.ErrorContains(t, err, c.Error, c.Name)
	}
	for _, h := range v.Heartbeats {
		got, err := EncodeHeartbeat(h.IDs)
		require.NoError(t, err, h.Name)
		require.Equal(t, h.Hex, hex.EncodeToString(got), h.Name)
		back, err := DecodeHeartbeat(unhex(h.Hex))
		require.NoError(t, err, h.Name)
		require.Equal(t, h.IDs, back, h.Name)
	}
	for _, h := range v.HeartbeatsInvalid {
		_, err := DecodeHeartbeat(unhex(h.Hex))
		require.ErrorIs(t, err, ErrMalformed, h.Name)
		require.ErrorContains(t, err, h.Error, h.Name)
	}
}
