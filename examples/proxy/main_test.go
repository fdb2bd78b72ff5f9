package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/gonixl/gonixl/examples/discovery"
	"github.com/gonixl/gonixl/examples/discovery/etcdtest"
)

// A pull engine pair in a few lines, enough to see the command serve and shut down.
func engine(t *testing.T, role string) *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("GET /kv_transfer_info", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"engine_id": role, "role": role, "connector": "pull"})
	})
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) {
		var kv any = map[string]any{"do_remote_prefill": true, "remote_engine_id": role}
		if role == "decode" {
			kv = nil
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"object": "text_completion",
			"choices": []any{map[string]any{"index": 0, "text": role}}, "kv_transfer_params": kv})
	})
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

func TestRun(t *testing.T) {
	pre, dec := engine(t, "prefill"), engine(t, "decode")
	ctx, cancel := context.WithCancel(context.Background())
	addr, errc := startRun(t, ctx, "-port", "0", "-prefill", strings.TrimPrefix(pre.URL, "http://"),
		"-decode", strings.TrimPrefix(dec.URL, "http://"))
	completeToy(t, addr)
	cancel() // what SIGTERM does
	waitStopped(t, errc)
	if err := run(context.Background(), []string{"-policy", "random", "-prefill", "a", "-decode", "b"}, nil); err == nil {
		t.Fatal("bad policy accepted")
	}
}

// The command with -etcd: it routes to the engines registered there, and to nothing else.
func TestRunWithEtcd(t *testing.T) {
	srv := etcdtest.Start(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, role := range []string{"prefill", "decode"} {
		e := engine(t, role)
		rec := discovery.Record{EngineID: role + "-1", Role: role, HTTPAddr: strings.TrimPrefix(e.URL, "http://"),
			SideChannelAddr: "127.0.0.1:5600", Connector: "pull", TPSize: 1, PPSize: 1, Model: "toy", CompatHash: "h", Incarnation: "1"}
		reg, err := discovery.Register(ctx, discovery.RegisterConfig{Client: cli, Cluster: "cmd", Record: rec, TTL: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer reg.Close(context.Background())
	}
	// A prefill engine of another model geometry (another compatibility hash) and one of
	// the push connector: never paired with the pull decode engine above.
	for i, odd := range []struct{ connector, compat string }{{"pull", "other-model"}, {"push", "h"}} {
		mux := http.NewServeMux()
		mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {})
		mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) {
			t.Errorf("a prefill engine of connector %s, hash %s got a request", odd.connector, odd.compat)
		})
		e := httptest.NewServer(mux)
		defer e.Close()
		rec := discovery.Record{EngineID: fmt.Sprintf("odd-%d", i), Role: "prefill", HTTPAddr: strings.TrimPrefix(e.URL, "http://"),
			SideChannelAddr: "127.0.0.1:5600", Connector: odd.connector, TPSize: 1, PPSize: 1, Model: "toy", CompatHash: odd.compat, Incarnation: "1"}
		reg, err := discovery.Register(ctx, discovery.RegisterConfig{Client: cli, Cluster: "cmd", Record: rec, TTL: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer reg.Close(context.Background())
	}
	addr, errc := startRun(t, ctx, "-port", "0", "-etcd", srv.Endpoint, "-cluster", "cmd")
	for range 6 {
		completeToy(t, addr)
	}
	cancel()
	waitStopped(t, errc)
	if err := run(context.Background(), []string{"-etcd", "127.0.0.1:1", "-etcd-timeout", "500ms", "-port", "0"}, nil); err == nil || !strings.Contains(err.Error(), "-etcd 127.0.0.1:1") {
		t.Fatalf("unreachable etcd: %v", err)
	}
}

// startRun starts the command with args until ctx ends and returns its
// listening address and the channel its end comes on.
func startRun(t *testing.T, ctx context.Context, args ...string) (string, chan error) {
	t.Helper()
	addrc := make(chan string, 1)
	errc := make(chan error, 1)
	go func() { errc <- run(ctx, args, func(a string) { addrc <- a }) }()
	select {
	case addr := <-addrc:
		return addr, errc
	case err := <-errc:
		t.Fatal(err)
	case <-time.After(10 * time.Second):
		t.Fatal("not listening")
	}
	return "", nil
}

// completeToy sends one completion through the proxy at addr and checks
// that the decode engine answered it.
func completeToy(t *testing.T, addr string) {
	t.Helper()
	resp, err := http.Post("http://"+addr+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"toy","prompt":"hi","max_tokens":3}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"text":"decode"`) {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
}

// waitStopped waits for the command started by startRun to end cleanly
// once its context ended.
func waitStopped(t *testing.T, errc chan error) {
	t.Helper()
	http.DefaultClient.CloseIdleConnections()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no graceful shutdown")
	}
}

// The proxy's error lines are one plain line each: no stack trace.
func TestLogHasNoStackTrace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	cfg := logConfig(false)
	cfg.OutputPaths = []string{path}
	log, err := cfg.Build()
	if err != nil {
		t.Fatal(err)
	}
	log.Error("engine out of rotation: it reports the other role; check -prefill and -decode", zap.String("engine", "http://x"))
	_ = log.Sync()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var line map[string]any
	if err := json.Unmarshal(b, &line); err != nil {
		t.Fatalf("not one JSON line: %q", b)
	}
	if _, ok := line["stacktrace"]; ok {
		t.Fatalf("error line carries a stack trace: %s", b)
	}
	if line["engine"] != "http://x" || line["level"] != "error" {
		t.Fatalf("line %s", b)
	}
}
