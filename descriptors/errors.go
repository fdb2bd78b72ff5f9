package descriptors

import "errors"

// ErrInvalid is matched (errors.Is) by every error that reports a layout or
// block list that cannot be used; the message names the field and values.
var ErrInvalid = errors.New("descriptors: invalid")

// ErrIncompatible is matched by every error that reports two layouts that
// cannot exchange blocks (different layer counts, dtypes, head sizes, MLA, a
// head split or block-size ratio that does not divide); the message names
// both sides' values.
var ErrIncompatible = errors.New("descriptors: incompatible layouts")
