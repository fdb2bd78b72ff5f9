package pyjson

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The expected strings are what CPython 3.11's json.dumps writes for each input.
func TestQuoteTable(t *testing.T) {
	for _, tc := range []struct{ in, ascii, raw string }{
		{"", `""`, `""`},
		{"plain/slash", `"plain/slash"`, `"plain/slash"`},
		{`q"b\s`, `"q\"b\\s"`, `"q\"b\\s"`},
		{"\b\f\n\r\t", `"\b\f\n\r\t"`, `"\b\f\n\r\t"`},
		{"\x00\x01\x1f\x7f", `"\u0000\u0001\u001f\u007f"`, "\"\\u0000\\u0001\\u001f\x7f\""},
		{"\u0080\u00e9\u07ff\u0800\uffff", `"\u0080\u00e9\u07ff\u0800\uffff"`, "\"\u0080\u00e9\u07ff\u0800\uffff\""},
		{"\U00010000\U0010ffff\U0001F600", `"\ud800\udc00\udbff\udfff\ud83d\ude00"`, "\"\U00010000\U0010ffff\U0001F600\""},
		{"<>&'", `"<>&'"`, `"<>&'"`},
		{"\u2028\u2029", `"\u2028\u2029"`, "\"\u2028\u2029\""},
		{"bad \xff byte", `"bad \ufffd byte"`, "\"bad \ufffd byte\""}, // no Python string holds it: U+FFFD
	} {
		require.Equal(t, tc.ascii, Quote(tc.in, true), "ensure_ascii: %q", tc.in)
		require.Equal(t, tc.raw, Quote(tc.in, false), "not ensure_ascii: %q", tc.in)
	}
}

// trickyStrings are the inputs compared with Python: every ASCII character, C1 controls,
// the edges of each UTF-8 length and of the surrogate range, line and paragraph
// separators, the BOM, U+FFFD and U+FFFF, astral characters (surrogate pairs), bytes that
// are not UTF-8, and random strings drawn from all of these ranges.
func trickyStrings() []string {
	var ascii strings.Builder
	for r := rune(0); r < 0x80; r++ {
		ascii.WriteRune(r)
	}
	out := []string{"", ascii.String(), "\u0080\u0085\u009f\u00a0\u00e9\u00ff\u0100\u07ff\u0800",
		"\u2028\u2029\ud7ff\ue000\ufeff\ufffd\uffff", "\U00010000\U0001F600\U0010ffff", "bad \xff\xfe\xc3 bytes",
		"caf\u00e9 東京 \U0001F600 \"q\" \\ / <>&", "\x7f\x00"}
	ranges := [][2]rune{{0, 0x20}, {0x20, 0x7f}, {0x7f, 0xa0}, {0xa0, 0x800}, {0x800, 0xd800}, {0xe000, 0x10000}, {0x10000, 0x110000}}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 300 {
		var b strings.Builder
		for range rng.IntN(12) {
			rg := ranges[rng.IntN(len(ranges))]
			b.WriteRune(rg[0] + rng.Int32N(rg[1]-rg[0]))
		}
		out = append(out, b.String())
	}
	return out
}

// pythonDumps is the Python side: json.dumps of each input, with and without ensure_ascii.
const pythonDumps = `
import json, sys
xs = json.load(sys.stdin)
json.dump({"ascii": [json.dumps(x) for x in xs], "raw": [json.dumps(x, ensure_ascii=False) for x in xs]}, sys.stdout)
`

// TestQuoteMatchesPython runs python3's json.dumps on trickyStrings. The strings travel to
// Python as JSON, where bytes that are not UTF-8 become U+FFFD, as WriteString writes them.
// A Python string may hold a lone surrogate, which no Go string can: those are not compared.
func TestQuoteMatchesPython(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not on PATH: the comparison with Python's json.dumps did not run (TestQuoteTable holds its answers)")
	}
	in := trickyStrings()
	payload, err := json.Marshal(in)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // bounds a hang only
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-c", pythonDumps)
	cmd.Stdin = bytes.NewReader(payload)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "python3: %s", stderr.String())
	var want struct{ ASCII, Raw []string }
	require.NoError(t, json.Unmarshal(out, &want))
	require.Len(t, want.ASCII, len(in))
	require.Len(t, want.Raw, len(in))
	for i, s := range in {
		require.Equal(t, want.ASCII[i], Quote(s, true), "ensure_ascii=True: %q", s)
		require.Equal(t, want.Raw[i], Quote(s, false), "ensure_ascii=False: %q", s)
	}
}

// Whatever the string, both forms are JSON that reads back as it (bytes that are not UTF-8
// as U+FFFD), and the ensure_ascii form is ASCII.
func FuzzQuoteReadsBack(f *testing.F) {
	for _, s := range trickyStrings()[:8] {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want := string([]rune(s)) // each byte that is not UTF-8 as U+FFFD
		for _, ascii := range []bool{true, false} {
			q := Quote(s, ascii)
			var got string
			if err := json.Unmarshal([]byte(q), &got); err != nil {
				t.Fatalf("Quote(%q, %v) = %s: not JSON: %v", s, ascii, q, err)
			}
			if got != want {
				t.Fatalf("Quote(%q, %v) = %s reads back as %q", s, ascii, q, got)
			}
			if ascii {
				for i := 0; i < len(q); i++ {
					if q[i] >= 0x80 {
						t.Fatalf("Quote(%q, true) = %s: byte %#x is not ASCII", s, q, q[i])
					}
				}
			}
		}
	})
}
