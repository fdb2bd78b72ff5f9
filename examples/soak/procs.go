package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gonixl/gonixl/examples/stack"
)

// procs is the stack as users run it: the engine and proxy programs (built
// with -tags nixl: NIXL agents over UCX on the loopback device) in
// processes of their own. Kill is kill -9; Restart runs the same command
// line with the ports the first start picked.
type procs struct {
	bin    stack.Programs
	logDir string
	args   map[string][]string
	cmds   map[string]*exec.Cmd
	waits  map[string]chan struct{}
	urls   map[string]string // base URLs
	starts map[string]int    // starts of each part, for its log's name
	prefix string
	mu     sync.Mutex // cmds: the sampler reads PIDs while a step kills
}

// procEnv keeps UCX and NIXL on the loopback device and quiet.
var procEnv = []string{"UCX_NET_DEVICES=lo", "NIXL_LOG_LEVEL=ERROR", "UCX_LOG_LEVEL=error", "UCX_ERROR_SIGNALS="}

func startProcs(ctx context.Context, bin stack.Programs, logDir, connector string, shape stackShape) (_ *procs, err error) {
	t := &procs{bin: bin, logDir: logDir, args: map[string][]string{}, cmds: map[string]*exec.Cmd{}, waits: map[string]chan struct{}{},
		urls: map[string]string{}, starts: map[string]int{}, prefix: connector}
	defer func() {
		if err != nil {
			t.Close()
		}
	}()
	engine := []string{"-model", "qwen2.5-7b", "-layers", strconv.Itoa(shape.Layers), "-kv-heads", strconv.Itoa(shape.KVHeads),
		"-head-dim", strconv.Itoa(shape.HeadDim), "-tp", strconv.Itoa(shape.TP), "-num-blocks", strconv.Itoa(shape.NumBlocks),
		"-max-num-seqs", strconv.Itoa(shape.MaxBatch), "-compute-scale", strconv.FormatFloat(shape.ComputeScale, 'g', -1, 64),
		"-served-model-name", shape.ServedModel, "-agent", "nixl", "-connector", connectorOf(connector), "-connector-log=false",
		"-lease", shape.Lease.String(), "-request-timeout", shape.RequestTimeout.String()}
	for _, part := range []string{partPrefill, partDecode} {
		args := append(append(append([]string{}, engine...), "-role", part, "-engine-id", connector+"-"+part), progressiveArgs(connector, part)...)
		log, err := t.start(part, append(args, "-port", "0", "-side-channel-port", "0"))
		if err != nil {
			return nil, err
		}
		if t.urls[part], err = stack.LogField(ctx, log, "ready", "url", time.Minute); err != nil {
			return nil, err
		}
		side, err := sideChannelPort(t.urls[part])
		if err != nil {
			return nil, err
		}
		t.args[part] = append(args, "-port", port(t.urls[part]), "-side-channel-port", strconv.Itoa(side))
	}
	proxy := []string{"-connector", connectorOf(connector), "-request-timeout", shape.ProxyTimeout.String(), "-health-interval", shape.HealthInterval.String(),
		"-prefill", strings.TrimPrefix(t.urls[partPrefill], "http://"), "-decode", strings.TrimPrefix(t.urls[partDecode], "http://")}
	log, err := t.start(partProxy, append(proxy, "-port", "0"))
	if err != nil {
		return nil, err
	}
	addr, err := stack.LogField(ctx, log, "listening", "addr", time.Minute)
	if err != nil {
		return nil, err
	}
	t.urls[partProxy] = "http://" + addr
	t.args[partProxy] = append(proxy, "-port", port(t.urls[partProxy]))
	return t, stack.WaitHealthy(ctx, t.urls[partProxy]+"/healthcheck", time.Minute)
}

func port(url string) string { return url[strings.LastIndex(url, ":")+1:] }

func sideChannelPort(engineURL string) (int, error) {
	resp, err := http.Get(engineURL + "/kv_transfer_info")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var info struct {
		Port int `json:"side_channel_port"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil || info.Port == 0 {
		return 0, fmt.Errorf("%s/kv_transfer_info: no side_channel_port (%v)", engineURL, err)
	}
	return info.Port, nil
}

// start runs part's program with args, its output in a log of its own.
func (t *procs) start(part string, args []string) (string, error) {
	t.starts[part]++
	log := filepath.Join(t.logDir, fmt.Sprintf("%s-%s-%d.log", t.prefix, part, t.starts[part]))
	f, err := os.Create(log)
	if err != nil {
		return "", err
	}
	defer f.Close()
	bin := t.bin.Engine
	if part == partProxy {
		bin = t.bin.Proxy
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), procEnv...)
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start %s: %w", part, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }() //nolint:errcheck // killed on purpose
	t.mu.Lock()
	t.cmds[part], t.waits[part] = cmd, done
	t.mu.Unlock()
	return log, nil
}

func (t *procs) ProxyURL() string             { return t.urls[partProxy] }
func (t *procs) EngineURL(part string) string { return t.urls[part] }

func (t *procs) PID(part string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c := t.cmds[part]; c != nil {
		return c.Process.Pid
	}
	return 0
}

func (t *procs) Kill(part string) error {
	c := t.cmds[part]
	if c == nil {
		return fmt.Errorf("%s: not running", part)
	}
	if err := c.Process.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("%s: kill -9: %w", part, err)
	}
	select {
	case <-t.waits[part]:
	case <-time.After(30 * time.Second):
		return fmt.Errorf("%s (pid %d) still runs 30 s after kill -9", part, c.Process.Pid)
	}
	t.mu.Lock()
	delete(t.cmds, part)
	t.mu.Unlock()
	return nil
}

func (t *procs) Restart(part string, within time.Duration) error {
	deadline := time.Now().Add(within)
	health := t.urls[part] + "/health"
	if part == partProxy {
		health = t.urls[part] + "/healthcheck"
	}
	for {
		if _, err := t.start(part, t.args[part]); err != nil {
			return err
		}
		err := stack.WaitHealthy(context.Background(), health, min(time.Until(deadline), 20*time.Second))
		if err == nil {
			return nil
		}
		// The port may still be held a moment (a socket of the killed
		// process): the program exits, start it again.
		select {
		case <-t.waits[part]:
		default:
			t.Kill(part)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: restart on %s: %w", part, t.urls[part], err)
		}
	}
}

// Close stops every program with SIGTERM (a graceful drain), killing any
// still running 30 s later.
func (t *procs) Close() error {
	var errs []error
	for _, part := range []string{partProxy, partDecode, partPrefill} {
		c := t.cmds[part]
		if c == nil {
			continue
		}
		_ = c.Process.Signal(syscall.SIGTERM)
		select {
		case <-t.waits[part]:
		case <-time.After(30 * time.Second):
			_ = c.Process.Kill()
			<-t.waits[part]
			errs = append(errs, fmt.Errorf("%s did not stop within 30 s of SIGTERM: killed", part))
		}
		delete(t.cmds, part)
	}
	return errors.Join(errs...)
}
