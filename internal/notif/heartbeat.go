package notif

import (
	"bytes"
	"fmt"
	"strings"
)

// HeartbeatPrefix starts every heartbeat message.
const HeartbeatPrefix = "HB:"

// MaxHeartbeatIDs bounds the number of ids one heartbeat may carry.
const MaxHeartbeatIDs = 1 << 14

// IsHeartbeat reports whether msg is meant as a heartbeat (has its prefix);
// it says nothing about whether the rest is well formed.
func IsHeartbeat(msg []byte) bool { return bytes.HasPrefix(msg, []byte(HeartbeatPrefix)) }

// EncodeHeartbeat returns "HB:<id>,<id>,...". Ids must be non-empty and free
// of ','; at least one id is required and at most MaxHeartbeatIDs.
func EncodeHeartbeat(ids []string) ([]byte, error) {
	if len(ids) == 0 {
		return nil, fmt.Errorf("notif: heartbeat needs at least one request id")
	}
	if len(ids) > MaxHeartbeatIDs {
		return nil, fmt.Errorf("notif: heartbeat carries %d ids, limit %d", len(ids), MaxHeartbeatIDs)
	}
	n := len(HeartbeatPrefix)
	for _, id := range ids {
		if err := checkID(id); err != nil {
			return nil, err
		}
		if strings.IndexByte(id, ',') >= 0 {
			return nil, fmt.Errorf("notif: request id %q contains ',' and cannot go in a heartbeat", id)
		}
		n += len(id) + 1
	}
	b := make([]byte, 0, n)
	b = append(b, HeartbeatPrefix...)
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, id...)
	}
	return b, nil
}

// SplitHeartbeats encodes ids into as few heartbeats as possible, each at
// most maxLen bytes (a transport limit); ids that cannot be encoded are
// skipped and returned in bad with the reason.
func SplitHeartbeats(ids []string, maxLen int) (msgs [][]byte, bad []error) {
	var batch []string
	size := len(HeartbeatPrefix)
	flush := func() {
		if len(batch) == 0 {
			return
		}
		m, err := EncodeHeartbeat(batch)
		if err != nil {
			bad = append(bad, err)
		} else {
			msgs = append(msgs, m)
		}
		batch, size = nil, len(HeartbeatPrefix)
	}
	for _, id := range ids {
		if _, err := EncodeHeartbeat([]string{id}); err != nil {
			bad = append(bad, err)
			continue
		}
		if len(batch) > 0 && (size+1+len(id) > maxLen || len(batch) == MaxHeartbeatIDs) {
			flush()
		}
		if len(batch) > 0 {
			size++ // the comma
		}
		batch = append(batch, id)
		size += len(id)
	}
	flush()
	return msgs, bad
}

// DecodeHeartbeat parses "HB:<id>,<id>,...": the prefix, then one or more
// non-empty ids separated by single commas.
func DecodeHeartbeat(msg []byte) ([]string, error) {
	if !IsHeartbeat(msg) {
		return nil, fmt.Errorf("%w: heartbeat %q does not start with %q", ErrMalformed, clip(msg), HeartbeatPrefix)
	}
	body := msg[len(HeartbeatPrefix):]
	if len(body) == 0 {
		return nil, fmt.Errorf("%w: heartbeat carries no request id", ErrMalformed)
	}
	if c := bytes.Count(body, []byte{','}) + 1; c > MaxHeartbeatIDs {
		return nil, fmt.Errorf("%w: heartbeat carries %d ids, limit %d", ErrMalformed, c, MaxHeartbeatIDs)
	}
	parts := bytes.Split(body, []byte{','})
	ids := make([]string, len(parts))
	for i, p := range parts {
		if len(p) == 0 {
			return nil, fmt.Errorf("%w: heartbeat %q has an empty request id at position %d", ErrMalformed, clip(msg), i)
		}
		if len(p) > MaxIDLen {
			return nil, fmt.Errorf("%w: heartbeat request id at position %d is %d bytes, limit %d", ErrMalformed, i, len(p), MaxIDLen)
		}
		ids[i] = string(p)
	}
	return ids, nil
}
