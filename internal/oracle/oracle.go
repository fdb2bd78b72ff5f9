// Package oracle runs vLLM's own connector code for gonixl's tests: the
// vLLM release users run, installed from PyPI by .ci/vllm-oracle into a
// virtual environment, driven by testdata/vllm/oracle.py (docs/vllm.md,
// "What ran against vLLM's own code").
//
// A test that needs it calls Python: without the environment the test is
// skipped, saying how to install it, unless GONIXL_VLLM_ORACLE=require (as
// .ci/run sets once it installed it), where a missing oracle fails the test.
package oracle

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// DefaultVenv is where .ci/vllm-oracle installs the environment
// (GONIXL_VLLM_VENV overrides both).
const DefaultVenv = "/opt/gonixl-vllm"

// callTimeout bounds one oracle command: importing vLLM alone takes
// seconds, more on a busy machine; the deadline only keeps a wedged
// Python from hanging the test run.
const callTimeout = 5 * time.Minute

// Python returns the oracle environment's python, or skips t.
func Python(t testing.TB) string {
	t.Helper()
	venv := os.Getenv("GONIXL_VLLM_VENV")
	if venv == "" {
		venv = DefaultVenv
	}
	py := filepath.Join(venv, "bin", "python")
	if _, err := os.Stat(py); err != nil {
		msg := "vLLM's own code is not installed (" + py + "): run .ci/vllm-oracle (or set GONIXL_VLLM_VENV)"
		if os.Getenv("GONIXL_VLLM_ORACLE") == "require" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return py
}

// Script is the path of testdata/vllm/oracle.py.
func Script() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "testdata", "vllm", "oracle.py")
}

// Run runs one oracle command with stdin and returns its stdout lines.
// A failing command fails t with its stderr.
func Run(t testing.TB, stdin string, args ...string) []string {
	t.Helper()
	py := Python(t)
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, append([]string{Script()}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Env = env()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("oracle %s: %v\n%s", args[0], err, tail(stderr.String()))
	}
	return strings.Split(strings.TrimSpace(stdout.String()), "\n")
}

// Server is a long-running oracle command (listen): its stdout lines
// arrive on Lines, and closing its stdin (Stop, or the test's end) ends it.
type Server struct {
	Lines <-chan string
	Stop  func()
}

// Start starts a long-running oracle command; it ends at the test's end.
func Start(t testing.TB, args ...string) Server {
	t.Helper()
	py := Python(t)
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	cmd := exec.CommandContext(ctx, py, append([]string{Script()}, args...)...)
	cmd.Env = env()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	lines := make(chan string, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		in.Close()
		<-done
		_ = cmd.Wait()
		cancel()
		if t.Failed() && stderr.Len() > 0 {
			t.Logf("oracle %s stderr:\n%s", args[0], tail(stderr.String()))
		}
	}
	t.Cleanup(stop)
	return Server{Lines: lines, Stop: stop}
}

// Next returns the server's next line, failing t if it ends first or
// within callTimeout gives none.
func (s Server) Next(t testing.TB) string {
	t.Helper()
	select {
	case l, ok := <-s.Lines:
		if !ok {
			t.Fatal("the oracle exited early")
		}
		return l
	case <-time.After(callTimeout):
		t.Fatal("no line from the oracle")
		return ""
	}
}

func env() []string {
	// vLLM logs at INFO to stdout unless told otherwise; the answers are
	// the only stdout lines wanted.
	return append(os.Environ(), "VLLM_LOGGING_LEVEL=ERROR", "VLLM_CONFIGURE_LOGGING=0", "PYTHONUNBUFFERED=1")
}

func tail(s string) string {
	if len(s) > 4000 {
		return "..." + s[len(s)-4000:]
	}
	return s
}
