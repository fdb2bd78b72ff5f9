// Package pyjson writes strings exactly as Python's json.dumps writes them, for the bytes
// that vLLM hashes or hands to a client: the compatibility hash of two NIXL peers (the
// SHA-256 of json.dumps(factors, sort_keys=True)) and the tool call arguments a Hermes
// parser re-serializes (json.dumps(args, ensure_ascii=False)). Go's encoding/json differs
// from both: it escapes '<', '>', '&', U+2028 and U+2029 and no other non-ASCII character.
//
// Python (json/encoder.py, CPython 3.11, and its C accelerator) writes '"' and '\' with a
// backslash, \b \f \n \r \t in their short forms and every other character below U+0020 as
// \u00XX (lowercase hex). With ensure_ascii (the default) every character outside ' '..'~'
// is \uXXXX as well, U+007F included, and a character above U+FFFF its UTF-16 surrogate
// pair; without it they are written as they are. '/' is never escaped.
//
// A Go string may hold bytes that are not UTF-8, which no Python string holds: each is
// written as U+FFFD, as ranging over the string decodes it.
package pyjson

import "strings"

const hexDigits = "0123456789abcdef"

// WriteString writes s quoted as Python's json.dumps(s, ensure_ascii=ensureASCII) does.
func WriteString(b *strings.Builder, s string, ensureASCII bool) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			switch {
			case r < ' ':
				writeU4(b, r)
			case !ensureASCII || r <= '~':
				b.WriteRune(r)
			case r > 0xffff:
				r -= 0x10000
				writeU4(b, 0xd800|(r>>10)&0x3ff)
				writeU4(b, 0xdc00|r&0x3ff)
			default:
				writeU4(b, r)
			}
		}
	}
	b.WriteByte('"')
}

// Quote returns s quoted as WriteString writes it.
func Quote(s string, ensureASCII bool) string {
	var b strings.Builder
	WriteString(&b, s, ensureASCII)
	return b.String()
}

// writeU4 writes \u and r's four lowercase hex digits (r <= 0xffff).
func writeU4(b *strings.Builder, r rune) {
	b.WriteString(`\u`)
	for shift := 12; shift >= 0; shift -= 4 {
		b.WriteByte(hexDigits[(r>>shift)&0xf])
	}
}
