// Package statsdoc reads the counter names a page of docs/ lists, so that a
// connector's tests can hold the page to the counters its Stats().Extra
// really holds: a counter added, renamed or moved fails the test until the
// page says so.
package statsdoc

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// Section returns a page's text from the heading (a whole line such as
// "## Metrics") to the next heading of its level.
func Section(tb testing.TB, path, heading string) string {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "\n"+heading+"\n")
	if !ok {
		tb.Fatalf("%s has no heading %q", path, heading)
	}
	level := heading[:strings.IndexByte(heading, ' ')+1]
	body, _, _ := strings.Cut(rest, "\n"+level)
	return body
}

// Paragraph returns the paragraph of text that begins with start.
func Paragraph(tb testing.TB, text, start string) string {
	tb.Helper()
	_, rest, ok := strings.Cut(text, "\n"+start)
	if !ok {
		tb.Fatalf("no paragraph begins %q", start)
	}
	p, _, _ := strings.Cut(rest, "\n\n")
	return p
}

// counterName is a counter's name quoted in a page: `lower_snake_case`.
var counterName = regexp.MustCompile("`([a-z][a-z0-9_]*)`")

// Names returns the counter names quoted in text, in order; none is a
// failure (the paragraph asked for is not the one meant).
func Names(tb testing.TB, text string) []string {
	tb.Helper()
	var names []string
	for _, m := range counterName.FindAllStringSubmatch(text, -1) {
		names = append(names, m[1])
	}
	if len(names) == 0 {
		tb.Fatalf("no counter named in %q", text)
	}
	return names
}

// Concat joins lists in order.
func Concat(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}
