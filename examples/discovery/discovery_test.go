package discovery_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/gonixl/gonixl/examples/discovery"
	"github.com/gonixl/gonixl/examples/discovery/etcdtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func record(role, id string) discovery.Record {
	return discovery.Record{EngineID: id, Role: role, HTTPAddr: "127.0.0.1:8100", SideChannelAddr: "127.0.0.1:5600",
		Connector: "pull", TPSize: 2, PPSize: 1, Model: "m", CompatHash: "abcd", Incarnation: "1"}
}

func client(t *testing.T, srv *etcdtest.Server) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// latest collects OnChange's calls.
type latest struct {
	mu    sync.Mutex
	calls int
	recs  []discovery.Record
	ch    chan struct{}
}

func newLatest() *latest { return &latest{ch: make(chan struct{}, 1)} }

func (l *latest) on(recs []discovery.Record) {
	l.mu.Lock()
	l.calls++
	l.recs = recs
	l.mu.Unlock()
	select {
	case l.ch <- struct{}{}:
	default:
	}
}

// waitFor waits up to d for the live set to satisfy ok.
func (l *latest) waitFor(t *testing.T, d time.Duration, what string, ok func([]discovery.Record) bool) {
	t.Helper()
	deadline := time.After(d)
	for {
		l.mu.Lock()
		recs := l.recs
		l.mu.Unlock()
		if ok(recs) {
			return
		}
		select {
		case <-l.ch:
		case <-deadline:
			t.Fatalf("after %s: %s: live set is %+v", d, what, recs)
		}
	}
}

func ids(recs []discovery.Record) string {
	var s []string
	for _, r := range recs {
		s = append(s, r.Role+"/"+r.EngineID)
	}
	return strings.Join(s, ",")
}

func TestRegisterWatch(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := client(t, srv)
	ctx := context.Background()

	l := newLatest()
	w, err := discovery.Watch(ctx, discovery.WatchConfig{Client: cli, Cluster: "c1", OnChange: l.on})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	l.waitFor(t, 5*time.Second, "empty at start", func(r []discovery.Record) bool { return len(r) == 0 })

	p := record("prefill", "p0")
	rp, err := discovery.Register(ctx, discovery.RegisterConfig{Client: cli, Cluster: "c1", Record: p, TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	d := record("decode", "d0")
	d.HTTPAddr, d.SideChannelAddr = "127.0.0.1:8200", "127.0.0.1:5601"
	rd, err := discovery.Register(ctx, discovery.RegisterConfig{Client: cli, Cluster: "c1", Record: d, TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// Another cluster's engine is not seen.
	ro, err := discovery.Register(ctx, discovery.RegisterConfig{Client: cli, Cluster: "c2", Record: record("prefill", "other")})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close(ctx)
	l.waitFor(t, 5*time.Second, "both engines", func(r []discovery.Record) bool { return ids(r) == "decode/d0,prefill/p0" })
	got := w.Engines()
	if got[0] != d || got[1] != p {
		t.Fatalf("records %+v, want %+v and %+v", got, d, p)
	}

	// The stored value carries every field, under the documented key.
	kv, err := cli.Get(ctx, "/gonixl/c1/engines/prefill/p0")
	if err != nil || len(kv.Kvs) != 1 {
		t.Fatalf("Get: %v, %d keys", err, len(kv.Kvs))
	}
	var m map[string]any
	if err := json.Unmarshal(kv.Kvs[0].Value, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"engine_id", "role", "http_addr", "side_channel_addr", "connector", "tp_size", "pp_size", "model", "compat_hash", "incarnation"} {
		if _, ok := m[k]; !ok {
			t.Errorf("stored record lacks %q: %s", k, kv.Kvs[0].Value)
		}
	}
	if kv.Kvs[0].Lease == 0 || clientv3.LeaseID(kv.Kvs[0].Lease) != rp.Lease() {
		t.Errorf("key on lease %x, want the registration's %x", kv.Kvs[0].Lease, rp.Lease())
	}

	// Kept alive past several TTLs.
	time.Sleep(2500 * time.Millisecond)
	if got := ids(w.Engines()); got != "decode/d0,prefill/p0" {
		t.Fatalf("after 2.5 TTLs the live set is %s: keep-alives failed", got)
	}

	// Graceful: the key is deleted at once.
	if err := rp.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if kv, _ := cli.Get(ctx, "/gonixl/c1/engines/prefill/p0"); len(kv.Kvs) != 0 {
		t.Fatal("key still there after Close")
	}
	l.waitFor(t, 5*time.Second, "prefill gone", func(r []discovery.Record) bool { return ids(r) == "decode/d0" })

	// Killed: the key vanishes when its lease expires.
	rd.Abandon()
	l.waitFor(t, 10*time.Second, "decode expired", func(r []discovery.Record) bool { return len(r) == 0 })

	// A restart under the same id is a new incarnation.
	d.Incarnation = "2"
	rd2, err := discovery.Register(ctx, discovery.RegisterConfig{Client: cli, Cluster: "c1", Record: d, TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer rd2.Close(ctx)
	l.waitFor(t, 5*time.Second, "decode back", func(r []discovery.Record) bool { return len(r) == 1 && r[0].Incarnation == "2" })

	// A bad value is skipped and counted, not routed to.
	if _, err := cli.Put(ctx, "/gonixl/c1/engines/prefill/bad", `{"engine_id":"bad","role":"decode"}`); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for w.Invalid() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if w.Invalid() != 1 {
		t.Fatalf("Invalid = %d, want 1", w.Invalid())
	}
	if got := ids(w.Engines()); got != "decode/d0" {
		t.Fatalf("live set %s after a bad value", got)
	}
}

func TestRegisterRejects(t *testing.T) {
	ctx := context.Background()
	if _, err := discovery.Register(ctx, discovery.RegisterConfig{Record: record("prefill", "p")}); err == nil || !strings.Contains(err.Error(), "Client is required") {
		t.Fatalf("no client: %v", err)
	}
	srv := etcdtest.Start(t)
	cli := client(t, srv)
	bad := record("both", "p")
	if _, err := discovery.Register(ctx, discovery.RegisterConfig{Client: cli, Record: bad}); err == nil || !strings.Contains(err.Error(), `role "both"`) {
		t.Fatalf("bad role: %v", err)
	}
	if _, err := discovery.Register(ctx, discovery.RegisterConfig{Client: cli, Record: record("prefill", "p"), TTL: time.Millisecond}); err == nil || !strings.Contains(err.Error(), "whole seconds") {
		t.Fatalf("short TTL: %v", err)
	}
	if kv, _ := cli.Get(ctx, "/gonixl/", clientv3.WithPrefix()); len(kv.Kvs) != 0 {
		t.Fatalf("a refused registration left %d keys", len(kv.Kvs))
	}
}

func TestDecode(t *testing.T) {
	good := record("prefill", "p0")
	b, _ := json.Marshal(good)
	if r, err := discovery.Decode("c", "/gonixl/c/engines/prefill/p0", b); err != nil || r != good {
		t.Fatalf("Decode = %+v, %v", r, err)
	}
	for _, tc := range []struct{ key, val, want string }{
		{"/gonixl/x/engines/prefill/p0", string(b), "is not under"},
		{"/gonixl/c/engines/prefill", string(b), "want /gonixl/c/engines/<role>/<engine_id>"},
		{"/gonixl/c/engines/decode/p0", string(b), "holds the record of prefill engine"},
		{"/gonixl/c/engines/prefill/p0", "{", "value is not a record"},
		{"/gonixl/c/engines/prefill/p0", string(b) + "x", "value is not a record"},
		{"/gonixl/c/engines/prefill/p0", strings.Replace(string(b), `"tp_size":2`, `"tp_size":0`, 1), "tp_size 0"},
		{"/gonixl/c/engines/prefill/p0", strings.Replace(string(b), `"127.0.0.1:5600"`, `"127.0.0.1:0"`, 1), "side_channel_addr"},
		{"/gonixl/c/engines/prefill/p0", strings.Replace(string(b), `"pull"`, `"rdma"`, 1), `connector "rdma"`},
	} {
		if _, err := discovery.Decode("c", tc.key, []byte(tc.val)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Decode(%s, %s) = %v, want an error containing %q", tc.key, tc.val, err, tc.want)
		}
	}
}

func FuzzDecode(f *testing.F) {
	good := record("prefill", "p0")
	b, _ := json.Marshal(good)
	f.Add("/gonixl/c/engines/prefill/p0", b)
	f.Add("/gonixl/c/engines/decode/d", []byte(`{"engine_id":"d"}`))
	f.Fuzz(func(t *testing.T, key string, val []byte) {
		r, err := discovery.Decode("c", key, val)
		if err != nil {
			if r != (discovery.Record{}) {
				t.Fatalf("error %v with a record %+v", err, r)
			}
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("decoded an invalid record: %v", err)
		}
		if r.Key("c") != key {
			t.Fatalf("record's key %q, stored under %q", r.Key("c"), key)
		}
	})
}

// A lease that expired before Close (keep-alives late on a loaded host) is
// no error: the key went with it.
func TestCloseAfterTheLeaseExpired(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := client(t, srv)
	ctx := context.Background()
	r, err := discovery.Register(ctx, discovery.RegisterConfig{Client: cli, Cluster: "c", Record: record("decode", "d"), TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Revoke(ctx, r.Lease()); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(ctx); err != nil {
		t.Fatalf("Close after the lease ended: %v", err)
	}
	if kv, _ := cli.Get(ctx, r.Key()); len(kv.Kvs) != 0 {
		t.Fatalf("the key outlived Close: %s", kv.Kvs[0].Value)
	}
}
