package descriptors

import (
	"errors"
	"fmt"
)

// ErrInvalid is matched (errors.Is) by every error that reports a layout,
// block list or rank pair that cannot be used; the message names the field and
// its value.
var ErrInvalid = errors.New("descriptors: invalid argument")

// ErrIncompatible is matched by every error that reports two layouts that
// cannot exchange blocks (different layer counts, dtypes, head sizes, MLA, a
// block-size ratio that is not an integer); the message names both sides'
// values.
var ErrIncompatible = errors.New("descriptors: incompatible layouts")

// mappingError carries a precise message and unwraps to one of the sentinels,
// so callers test the kind with errors.Is and log the message as is.
type mappingError struct {
	kind error
	msg  string
}

func (e *mappingError) Error() string { return "descriptors: " + e.msg }
func (e *mappingError) Unwrap() error { return e.kind }

func invalidf(format string, args ...any) error {
	return &mappingError{kind: ErrInvalid, msg: fmt.Sprintf(format, args...)}
}

func incompatiblef(format string, args ...any) error {
	return &mappingError{kind: ErrIncompatible, msg: fmt.Sprintf(format, args...)}
}

// differ reports a field two layouts must agree on.
func differ(field string, src, dst any) error {
	return incompatiblef("%s differ: source %v, destination %v", field, src, dst)
}
