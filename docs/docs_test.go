// Package docs holds the project's documentation pages; its test checks
// that every Go snippet in them, and in the README, is code that compiles
// and runs: an excerpt of a tested Example function.
package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var goBlock = regexp.MustCompile("(?s)```go\n(.*?)```")

func TestGoSnippetsAreExcerptsOfExamples(t *testing.T) {
	var sources [][]string // the lines of every file with an Example
	err := filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.Contains(string(b), "\nfunc Example") {
			sources = append(sources, trimmed(string(b)))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	pages, _ := filepath.Glob("*.md")
	pages = append(pages, "../README.md")
	blocks := 0
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range goBlock.FindAllStringSubmatch(string(b), -1) {
			blocks++
			if !excerptOfAny(trimmed(m[1]), sources) {
				t.Errorf("%s: this Go snippet is not an excerpt of any Example function (copy it from one):\n%s", page, m[1])
			}
		}
	}
	if blocks == 0 {
		t.Fatal("no Go snippet found: did the pages move?")
	}
}

// trimmed returns s's lines without leading and trailing blanks, empty ones
// dropped, so indentation does not matter.
func trimmed(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

func excerptOfAny(block []string, sources [][]string) bool {
	for _, src := range sources {
		for i := 0; i+len(block) <= len(src); i++ {
			match := true
			for j := range block {
				if src[i+j] != block[j] {
					match = false
					break
				}
			}
			if match {
				return true
			}
		}
	}
	return false
}
