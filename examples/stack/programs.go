package stack

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// The same stack as separate processes: the helpers that build the engine
// and proxy programs and follow them, shared by the benchmark's process
// sweep and the tests that start the programs (examples/disagg,
// examples/proxy).

// Programs are the built engine (with -tags nixl: NIXL agents) and proxy.
type Programs struct{ Engine, Proxy string }

// BuildPrograms builds examples/engine (with -tags nixl) and examples/proxy
// into dir, from the module the caller runs in (so run it inside the
// repository).
func BuildPrograms(ctx context.Context, dir string) (Programs, error) {
	b := Programs{Engine: filepath.Join(dir, "engine"), Proxy: filepath.Join(dir, "proxy")}
	for _, x := range []struct{ out, pkg string }{{b.Engine, "github.com/gonixl/gonixl/examples/engine"}, {b.Proxy, "github.com/gonixl/gonixl/examples/proxy"}} {
		cmd := exec.CommandContext(ctx, "go", "build", "-tags", "nixl", "-o", x.out, x.pkg)
		if out, err := cmd.CombinedOutput(); err != nil {
			return b, fmt.Errorf("go build -tags nixl %s (run inside the repository): %v\n%s", x.pkg, err, out)
		}
	}
	return b, nil
}

// LogLine waits, up to within, for the first line of the JSON log at path
// whose "msg" is msg (and, when key is not "", that has a string field
// key), and returns it. When exited is not nil and closes (the program
// ended), the log is read once more and then LogLine gives up at once.
func LogLine(ctx context.Context, path, msg, key string, within time.Duration, exited <-chan struct{}) (map[string]any, error) {
	deadline := time.Now().Add(within)
	gone := false
	for {
		if m := findLogLine(path, msg, key); m != nil {
			return m, nil
		}
		switch {
		case gone:
			return nil, fmt.Errorf("%s: the program exited before logging %q", path, msg)
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case time.Now().After(deadline):
			return nil, fmt.Errorf("%s: no %q log line with %q within %v", path, msg, key, within)
		}
		select {
		case <-exited:
			gone = true
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// LogField is LogLine's string field key.
func LogField(ctx context.Context, path, msg, key string, within time.Duration) (string, error) {
	m, err := LogLine(ctx, path, msg, key, within, nil)
	if err != nil {
		return "", err
	}
	return m[key].(string), nil
}

func findLogLine(path, msg, key string) map[string]any {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) != nil || m["msg"] != msg {
			continue
		}
		if _, ok := m[key].(string); key == "" || ok {
			return m
		}
	}
	return nil
}

// WaitHealthy waits, up to within, until GET url answers 200.
func WaitHealthy(ctx context.Context, url string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s not healthy within %v", url, within)
}
