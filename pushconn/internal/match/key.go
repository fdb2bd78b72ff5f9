package match

// Key identifies a request on one side of the match.
type Key struct {
	// RequestID is the side's own request id.
	RequestID string
	// TransferID is a router-assigned id, empty when the side has none.
	TransferID string
}

// suffixLen is the length of the "-xxxxxxxx" suffix that engines append.
const suffixLen = 9

// Base returns id without a trailing "-" and 8 hex digits (either case), or
// id itself when it has no such suffix.
func Base(id string) string {
	if len(id) < suffixLen || id[len(id)-suffixLen] != '-' {
		return id
	}
	for i := len(id) - suffixLen + 1; i < len(id); i++ {
		if !isHex(id[i]) {
			return id
		}
	}
	return id[:len(id)-suffixLen]
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// conflicts reports whether both keys carry a transfer id and the ids
// differ: then the request ids must not pair them.
func conflicts(a, b Key) bool {
	return a.TransferID != "" && b.TransferID != "" && a.TransferID != b.TransferID
}

// Kind is the rule that paired a registration with finished blocks.
type Kind int

// Match rules, in order of preference.
const (
	ByTransferID Kind = iota + 1 // both carry the same transfer id
	ByExactID                    // the request ids are equal
	ByStrippedID                 // the request ids are equal without their suffixes
)

// String names the rule for logs and metrics.
func (k Kind) String() string {
	switch k {
	case ByTransferID:
		return "transfer_id"
	case ByExactID:
		return "exact"
	case ByStrippedID:
		return "stripped"
	}
	return "none"
}
