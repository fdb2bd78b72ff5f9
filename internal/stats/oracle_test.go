package stats

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/internal/oracle"
)

// The line for an interval is vLLM's own for the same interval (vLLM
// 0.34.0's NixlKVConnectorStats.reduce, run by internal/oracle), item for
// item, text for text, before gonixl's own "gonixl.*" items: with
// transfers (means, numpy's P90, MB of 2^20, rounding), and with failures
// only (every figure the integer 0).
func TestOracleMetricsLine(t *testing.T) {
	type xfer struct {
		XferUS int `json:"xfer_us"`
		PostUS int `json:"post_us"`
		Bytes  int `json:"bytes"`
		Descs  int `json:"descs"`
	}
	type interval struct {
		Transfers           []xfer `json:"transfers"`
		FailedTransfers     int    `json:"failed_transfers"`
		FailedNotifications int    `json:"failed_notifications"`
		FailedHandshakes    int    `json:"failed_handshakes"`
		Expired             int    `json:"expired"`
		AfterExpiry         int    `json:"after_expiry"`
	}
	names := []string{"two transfers", "odd figures", "failures only"}
	cases := []interval{
		{Transfers: []xfer{{1500, 200, mib, 3}, {2500, 300, 3 * mib, 4}}, FailedHandshakes: 1},
		{Transfers: []xfer{{1234, 17, 123457, 1}, {987, 33, 7 << 20, 9}, {3333, 71, 999, 2}, {5, 1, 1, 1}, {77777, 456, 42 << 20, 128}},
			FailedTransfers: 2, FailedNotifications: 1, Expired: 3, AfterExpiry: 1},
		{FailedNotifications: 2, Expired: 1},
	}
	var in strings.Builder
	for _, iv := range cases {
		b, _ := json.Marshal(iv)
		in.Write(append(b, '\n'))
	}
	lines := oracle.Run(t, in.String(), "metrics-line") // one vLLM import for every case
	require.Len(t, lines, len(cases))
	for i, iv := range cases {
		t.Run(names[i], func(t *testing.T) {
			s := New()
			for _, x := range iv.Transfers {
				s.RecordTransfer(uint64(x.Bytes), x.Descs, time.Duration(x.XferUS)*time.Microsecond)
				s.RecordPost(time.Duration(x.PostUS) * time.Microsecond)
			}
			s.FailedTransfers.Add(uint64(iv.FailedTransfers))
			s.FailedNotifications.Add(uint64(iv.FailedNotifications))
			s.FailedHandshakes.Add(uint64(iv.FailedHandshakes))
			s.ExpiredRequests.Add(uint64(iv.Expired))
			s.LateNotifications.Add(uint64(iv.AfterExpiry))
			l, logs := newTestLogger(s)
			l.tick()
			require.Equal(t, 1, logs.Len())
			ours := logs.All()[0].Message

			var theirs struct{ Line string }
			require.NoError(t, json.Unmarshal([]byte(lines[i]), &theirs))
			rest, ok := strings.CutPrefix(ours, theirs.Line)
			require.True(t, ok, "ours:   %s\nvLLM's: %s", ours, theirs.Line)
			assert.True(t, rest == "" || strings.HasPrefix(rest, ", gonixl."), "after vLLM's items only gonixl's own: %q", rest)
		})
	}
}
