// Package docs holds the project's documentation pages; its test checks
// that every Go snippet in them, and in the README, is code that compiles
// and runs: an excerpt of a tested Example function, or, for a snippet
// that starts with "package main", the whole of a program whose directory
// runs it in an Example.
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
	var sources [][]string          // the lines of every file with an Example
	programs := map[string]string{} // a main package's file -> its lines, joined
	tested := map[string]bool{}     // directories with an Example
	err := filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		switch {
		case !strings.HasSuffix(path, "_test.go"):
			if strings.HasPrefix(strings.Join(trimmed(string(b)), "\n"), "package main") || strings.Contains(string(b), "\npackage main\n") {
				programs[path] = strings.Join(trimmed(string(b)), "\n")
			}
		case strings.Contains(string(b), "\nfunc Example"):
			sources = append(sources, trimmed(string(b)))
			tested[filepath.Dir(path)] = true
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
			if block := trimmed(m[1]); len(block) > 0 && block[0] == "package main" {
				if !wholeProgram(strings.Join(block, "\n"), programs, tested) {
					t.Errorf("%s: this Go program is not, whole, a main package file whose directory runs it in an Example:\n%s", page, m[1])
				}
				continue
			}
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

// wholeProgram reports whether prog is the whole of a main package's file
// (comments before the package clause aside) in a directory with an
// Example.
func wholeProgram(prog string, programs map[string]string, tested map[string]bool) bool {
	for path, src := range programs {
		if i := strings.Index(src, "package main"); i >= 0 && src[i:] == prog && tested[filepath.Dir(path)] {
			return true
		}
	}
	return false
}
