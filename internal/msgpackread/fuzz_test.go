package msgpackread_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/gonixl/gonixl/internal/msgpackread"
)

// walk reads one value with the typed methods (as a codec does) and
// reports whether it held an extension, which the reference decoder
// cannot take without a registered type.
func walk(r *msgpackread.Reader, depth int) (ext bool, err error) {
	if depth > msgpackread.MaxDepth {
		return false, errors.New("too deep")
	}
	c, err := r.Peek()
	if err != nil {
		return false, err
	}
	switch {
	case c == 0xc0:
		r.IsNil()
	case c == 0xc2 || c == 0xc3:
		_, err = r.Next(1)
	case c == 0xcf:
		_, err = r.Uint()
	case c <= 0x7f || c >= 0xe0 || (c >= 0xcc && c <= 0xd3):
		_, err = r.Int64()
	case c == 0xca || c == 0xcb:
		_, err = r.Number()
	case c <= 0x8f || c == 0xde || c == 0xdf:
		var n int
		if n, err = r.MapLen(-1); err == nil {
			for range 2 * n {
				e, err := walk(r, depth+1)
				if ext = ext || e; err != nil {
					return ext, err
				}
			}
		}
	case c <= 0x9f || c == 0xdc || c == 0xdd:
		var n int
		if n, err = r.ArrayLen(-1); err == nil {
			for range n {
				e, err := walk(r, depth+1)
				if ext = ext || e; err != nil {
					return ext, err
				}
			}
		}
	case c <= 0xbf || (c >= 0xd9 && c <= 0xdb):
		_, err = r.RawStr(-1)
	case c >= 0xc4 && c <= 0xc6:
		_, err = r.RawBin(-1)
	default: // extensions and 0xc1
		return true, r.Skip()
	}
	return ext, err
}

// FuzzReader checks, for any bytes: no read panics or runs past the input;
// a length header never yields more entries than the bytes left can hold;
// every error is an *Error naming a byte of the input; reading a value with
// the typed methods and skipping it agree on success and on where the
// value ends; and a value either accepts is one msgpack/v5 reads too.
func FuzzReader(f *testing.F) {
	for _, s := range []string{
		"\x81\xa1a\x01", "\x92\xc0\xc3", "\xdf\xff\xff\xff\xff", "\xdb\xff\xff\xff\xff",
		"\xc7\x01\x05\xaa", "\xcb\x3f\xf8\x00\x00\x00\x00\x00\x00", "\xa2\xff\xfe",
		"\x91\x91\x91\x91\x01", "\xc1", "\xcf\xff\xff\xff\xff\xff\xff\xff\xff", "\xd3\x80",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		checkErr := func(what string, err error) {
			var e *msgpackread.Error
			if err != nil && (!errors.As(err, &e) || e.Off < 0 || e.Off > len(in)) {
				t.Fatalf("%s: error %v is not an *Error naming a byte of %d", what, err, len(in))
			}
		}
		r := msgpackread.New(in, 0, nil)
		if n, err := r.MapLen(-1); err == nil && 2*n > r.Left() {
			t.Fatalf("map of %d entries with %d bytes left", n, r.Left())
		} else {
			checkErr("MapLen", err)
		}
		r = msgpackread.New(in, 0, nil)
		if n, err := r.ArrayLen(-1); err == nil && n > r.Left() {
			t.Fatalf("array of %d entries with %d bytes left", n, r.Left())
		} else {
			checkErr("ArrayLen", err)
		}
		for name, read := range map[string]func(r *msgpackread.Reader) error{
			"Str":    func(r *msgpackread.Reader) error { _, err := r.Str(16); return err },
			"Bin":    func(r *msgpackread.Reader) error { _, err := r.Bin(16); return err },
			"Uint":   func(r *msgpackread.Reader) error { _, err := r.Uint(); return err },
			"Int64":  func(r *msgpackread.Reader) error { _, err := r.Int64(); return err },
			"Int":    func(r *msgpackread.Reader) error { _, err := r.Int(-3, 1000); return err },
			"Number": func(r *msgpackread.Reader) error { _, err := r.Number(); return err },
		} {
			r := msgpackread.New(in, 0, nil)
			err := read(&r)
			checkErr(name, err)
			if err == nil && (r.Off() == 0 || r.Off() > len(in)) {
				t.Fatalf("%s read to byte %d of %d", name, r.Off(), len(in))
			}
		}

		skipped := msgpackread.New(in, 0, nil)
		skipErr := skipped.Skip()
		checkErr("Skip", skipErr)
		walked := msgpackread.New(in, 0, nil)
		ext, walkErr := walk(&walked, 1)
		if (skipErr == nil) != (walkErr == nil) {
			t.Fatalf("skip says %v, typed reads say %v", skipErr, walkErr)
		}
		if skipErr != nil {
			return
		}
		if skipped.Off() != walked.Off() {
			t.Fatalf("skip ends at byte %d, typed reads at %d", skipped.Off(), walked.Off())
		}
		if ext {
			return
		}
		br := bytes.NewReader(in[:skipped.Off()])
		if err := msgpack.NewDecoder(br).Skip(); err != nil || br.Len() != 0 {
			t.Fatalf("msgpack/v5 refuses what was read (%d bytes left): %v", br.Len(), err)
		}
	})
}
