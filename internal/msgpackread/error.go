package msgpackread

import (
	"fmt"
	"strconv"
)

// Error says where a message is malformed and how.
type Error struct {
	// Off is the byte the error concerns: where the offending value
	// starts, or where the input ran out.
	Off int
	// Msg says what is wrong ("want a map, got an array (0x92)").
	Msg string
	// OverLimit is set when a length is over the caller's limit (a string,
	// binary, map or array longer than allowed), so that a codec can
	// count such refusals apart.
	OverLimit bool
}

func (e *Error) Error() string { return "at byte " + strconv.Itoa(e.Off) + ": " + e.Msg }

// fail makes the error at byte off and passes it through r's wrap.
func (r *Reader) fail(off int, overLimit bool, format string, args ...any) error {
	e := &Error{Off: off, Msg: fmt.Sprintf(format, args...), OverLimit: overLimit}
	if r.wrap == nil {
		return e
	}
	return r.wrap(e)
}

// Errorf returns a codec's own error (a value of the right type but out of
// range) at the current offset, wrapped as the reader's errors are.
func (r *Reader) Errorf(format string, args ...any) error {
	return r.fail(r.off, false, format, args...)
}

// ErrorAt is Errorf for the value that starts at byte start (an offset
// taken with Off before reading it).
func (r *Reader) ErrorAt(start int, format string, args ...any) error {
	return r.fail(start, false, format, args...)
}

// typeName names the msgpack type that code c starts, for error messages.
func typeName(c byte) string {
	switch {
	case c <= 0x7f || c >= 0xe0 || (c >= 0xcc && c <= 0xd3):
		return fmt.Sprintf("an integer (0x%02x)", c)
	case c <= 0x8f || c == 0xde || c == 0xdf:
		return fmt.Sprintf("a map (0x%02x)", c)
	case c <= 0x9f || c == 0xdc || c == 0xdd:
		return fmt.Sprintf("an array (0x%02x)", c)
	case c <= 0xbf || (c >= 0xd9 && c <= 0xdb):
		return fmt.Sprintf("a string (0x%02x)", c)
	case c == 0xc0:
		return "nil (0xc0)"
	case c == 0xc2 || c == 0xc3:
		return fmt.Sprintf("a bool (0x%02x)", c)
	case c >= 0xc4 && c <= 0xc6:
		return fmt.Sprintf("binary (0x%02x)", c)
	case c == 0xca || c == 0xcb:
		return fmt.Sprintf("a float (0x%02x)", c)
	case c == 0xc1:
		return "the unused code 0xc1"
	}
	return fmt.Sprintf("an extension (0x%02x)", c)
}
