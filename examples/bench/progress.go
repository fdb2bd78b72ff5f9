package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// progress shows how far a run is: a bar redrawn in place on a terminal,
// or a plain line every tenth of the run (and at the end) otherwise, so that
// logs stay readable.
type progress struct {
	w        io.Writer
	tty      bool
	total    int
	label    string
	start    time.Time
	mu       sync.Mutex
	done     int
	failed   int
	lastLine int // plain mode: the last tenth printed
}

func newProgress(w io.Writer, total int, label string) *progress {
	return &progress{w: w, tty: isTerminal(w), total: total, label: label, start: time.Now(), lastLine: -1}
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// add records one ended request.
func (p *progress) add(failed bool) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done++
	if failed {
		p.failed++
	}
	p.draw()
}

func (p *progress) draw() {
	elapsed := time.Since(p.start).Round(100 * time.Millisecond)
	if p.tty {
		const width = 30
		filled := width * p.done / max(p.total, 1)
		fmt.Fprintf(p.w, "\r%s [%s%s] %d/%d failed %d %v ", p.label, strings.Repeat("=", filled), strings.Repeat(" ", width-filled),
			p.done, p.total, p.failed, elapsed)
		if p.done == p.total {
			fmt.Fprintln(p.w)
		}
		return
	}
	tenth := 10 * p.done / max(p.total, 1)
	if tenth > p.lastLine || p.done == p.total {
		p.lastLine = tenth
		fmt.Fprintf(p.w, "%s %d/%d requests ended (%d failed) after %v\n", p.label, p.done, p.total, p.failed, elapsed)
	}
}
