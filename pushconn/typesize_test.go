package pushconn

import (
	"testing"

	"github.com/gonixl/gonixl/internal/typesize"
)

// maxTypeLines bounds a type of this package: its declaration and its
// methods, across files, in lines (comments above them not counted). A
// type that outgrows it does more than one thing: the writer did (1,387
// lines), until its protocol became writeCore and the Consumer's glue
// decodeCore.
const maxTypeLines = 600

func TestNoTypeOverMaxLines(t *testing.T) {
	size, err := typesize.Lines(".")
	if err != nil {
		t.Fatal(err)
	}
	if size["writeCore"] == 0 || size["decodeCore"] == 0 {
		t.Fatalf("the writer or the decode core was not found: %v", size)
	}
	for name, n := range size {
		if n > maxTypeLines {
			t.Errorf("type %s spans %d lines with its methods, more than %d: split it along what its parts do", name, n, maxTypeLines)
		}
	}
}
