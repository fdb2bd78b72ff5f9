package chat

import (
	"unicode/utf8"
)

// detokenizer turns token ids into text chunk by chunk. A multi-byte
// character split across tokens is held back until its last byte arrives,
// so no chunk ends in half a character; the work per chunk is the chunk's
// bytes plus at most 3 held bytes.
type detokenizer struct {
	tok         *Tokenizer
	skipSpecial bool
	held        []byte // incomplete UTF-8 at the end of the last chunk
}

// next returns the text the new ids complete.
func (d *detokenizer) next(ids []int) (string, error) {
	buf := d.held
	for _, id := range ids {
		if !d.tok.Valid(id) {
			return "", &BadRequestError{Msg: "token id " + itoa(id) + " is outside the vocabulary (size " + itoa(d.tok.VocabSize()) + ")"}
		}
		if d.skipSpecial && d.tok.special[id] {
			continue
		}
		buf = append(buf, d.tok.pieces[id]...)
	}
	cut := completeUTF8Prefix(buf)
	out := toValidUTF8(buf[:cut])
	d.held = append(d.held[:0:0], buf[cut:]...)
	return out, nil
}

// flush returns the held bytes, each invalid run as U+FFFD.
func (d *detokenizer) flush() string {
	out := toValidUTF8(d.held)
	d.held = nil
	return out
}

// completeUTF8Prefix returns the length of buf without a trailing, possibly
// still incomplete, UTF-8 sequence.
func completeUTF8Prefix(buf []byte) int {
	n := len(buf)
	for back := 1; back <= 3 && back <= n; back++ {
		b := buf[n-back]
		if b < 0x80 {
			return n // ASCII: nothing open
		}
		if b >= 0xC0 { // a lead byte: is its sequence complete?
			if !utf8.FullRune(buf[n-back:]) {
				return n - back
			}
			return n
		}
	}
	return n
}

func toValidUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	out := make([]rune, 0, len(b))
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		out = append(out, r) // RuneError for each invalid byte, as Python's errors="replace" per maximal subpart
		b = b[size:]
	}
	return string(out)
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	neg := n < 0
	if neg {
		n = -n
	}
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			break
		}
	}
	if neg {
		i--
		b[i] = '-'
	}
	return string(b[i:])
}
