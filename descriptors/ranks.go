package descriptors

// Sources returns the source TP ranks whose blocks destination rank
// dst.TPRank needs, in ascending order (src.TPRank is ignored). With equal TP
// it is the same rank; when the destination has more ranks, the one source
// rank holding its heads; when the source has more ranks, every source rank
// holding one of its heads; with MLA (replicated KV) one source rank,
// dst.TPRank mod src.TPSize, so that load spreads. A pull connector on
// destination rank r reads from each rank in Sources; a destination rank
// expects len(Sources) completions (notifications) per request.
func Sources(src, dst *Layout) ([]int, error) {
	return nil, errNotImplemented
}

// Targets returns the destination TP ranks that source rank src.TPRank feeds
// (dst.TPRank is ignored): the ranks r for which Sources with dst.TPRank = r
// contains src.TPRank. A push writer on source rank s writes into each of
// them; it may be empty (MLA with more source than destination ranks).
func Targets(src, dst *Layout) ([]int, error) {
	return nil, errNotImplemented
}

// Compatible reports whether blocks can move from src to dst: both layouts
// valid, and equal NumLayers, DType, HeadBytes and MLA, block sizes that
// divide one another, and head splits that line up. The error matches
// ErrIncompatible or ErrInvalid and names both sides' values.
func Compatible(src, dst *Layout) error {
	return errNotImplemented
}
