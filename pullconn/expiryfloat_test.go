package pullconn

import (
	"testing"
	"time"
)

// remote_blocks_expiry_time read back never names a later time than the
// hold's deadline it was made from (found in review: up to 40 ns later
// before the read truncated to the microsecond).
func TestExpiryTimeNeverReadsLater(t *testing.T) {
	bad := 0
	var ex time.Time
	for us := int64(1_760_000_000_000_000); us < 1_760_000_000_000_000+200000; us += 7 {
		d := time.UnixMicro(us)
		p := Params{RemoteBlocksExpiryTime: expirySeconds(d)}
		got, _ := p.expiry()
		if got.After(d) {
			bad++
			ex = d
		}
	}
	if bad > 0 {
		p := Params{RemoteBlocksExpiryTime: expirySeconds(ex)}
		got, _ := p.expiry()
		t.Fatalf("%d deadlines parse back later than the hold, e.g. %v -> %v (+%v)", bad, ex.UnixNano(), got.UnixNano(), got.Sub(ex))
	}
}
