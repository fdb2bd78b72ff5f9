package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gonixl/gonixl/examples/stack"
)

// processStack is one point's stack as three programs: the prefill and the
// decode engine (examples/engine, built with -tags nixl: NIXL agents) and
// the proxy (examples/proxy), on 127.0.0.1, each on a free port it picks
// and logs.
type processStack struct {
	procs           []*exec.Cmd
	logs            []string
	prefill, decode string // engines' base URLs
	proxy           string
}

// startProcessStack starts the engines with the preset's engine arguments and
// the mode's connector, then the proxy, and waits until all are healthy.
func startProcessStack(ctx context.Context, bin stack.Programs, p preset, mode, logDir string) (_ *processStack, err error) {
	connector, inline, err := stack.ConnectorOf(mode)
	if err != nil {
		return nil, err
	}
	s := &processStack{}
	defer func() {
		if err != nil {
			err = errors.Join(err, s.close())
		}
	}()
	args := append([]string{"-connector", connector, "-agent", "nixl", "-connector-log=false", "-port", "0", "-side-channel-port", "0"}, p.EngineArgs...)
	if p.Lease > 0 {
		args = append(args, "-lease", p.Lease.String())
	}
	if p.RequestTimeout > 0 {
		args = append(args, "-request-timeout", p.RequestTimeout.String())
	}
	pargs := append(slices.Clone(args), "-role", "prefill", "-engine-id", "prefill-0")
	if mode == stack.ModePushProgressive || mode == stack.ModePushProgressiveLayers {
		pargs = append(pargs, "-progress-chunk", strconv.Itoa(stack.DefaultProgressChunk))
	}
	if mode == stack.ModePushProgressiveLayers {
		pargs = append(pargs, "-progress-layers")
	}
	pre, err := s.start(bin.Engine, filepath.Join(logDir, mode+"-prefill.log"), pargs...)
	if err != nil {
		return nil, err
	}
	dargs := append(args, "-role", "decode", "-engine-id", "decode-0")
	if inline {
		dargs = append(dargs, "-inline")
	}
	dec, err := s.start(bin.Engine, filepath.Join(logDir, mode+"-decode.log"), dargs...)
	if err != nil {
		return nil, err
	}
	if s.prefill, err = logged(ctx, pre, "ready", "url"); err != nil {
		return nil, err
	}
	if s.decode, err = logged(ctx, dec, "ready", "url"); err != nil {
		return nil, err
	}
	prx, err := s.start(bin.Proxy, filepath.Join(logDir, mode+"-proxy.log"), "-port", "0", "-connector", connector,
		"-prefill", strings.TrimPrefix(s.prefill, "http://"), "-decode", strings.TrimPrefix(s.decode, "http://"))
	if err != nil {
		return nil, err
	}
	addr, err := logged(ctx, prx, "listening", "addr")
	if err != nil {
		return nil, err
	}
	s.proxy = "http://" + addr
	for _, u := range []string{s.prefill + "/health", s.decode + "/health", s.proxy + "/healthcheck"} {
		if err := stack.WaitHealthy(ctx, u, time.Minute); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (s *processStack) start(bin, logPath string, args ...string) (string, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return "", err
	}
	defer f.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start %s: %w", bin, err)
	}
	s.procs = append(s.procs, cmd)
	s.logs = append(s.logs, logPath)
	return logPath, nil
}

// logged waits, up to a minute, for the program's JSON log line with msg and
// returns its string field key.
func logged(ctx context.Context, logPath, msg, key string) (string, error) {
	return stack.LogField(ctx, logPath, msg, key, time.Minute)
}

// close stops the proxy, then the engines, with SIGTERM (a graceful drain),
// and kills any that has not ended 30 s later.
func (s *processStack) close() error {
	var errs []error
	for i := len(s.procs) - 1; i >= 0; i-- {
		cmd := s.procs[i]
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w (log %s)", filepath.Base(cmd.Path), err, s.logs[i]))
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			errs = append(errs, fmt.Errorf("%s did not stop within 30 s of SIGTERM: killed (log %s)", filepath.Base(cmd.Path), s.logs[i]))
		}
	}
	s.procs = nil
	return errors.Join(errs...)
}
