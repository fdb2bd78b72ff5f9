package discovery

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// WatchConfig configures Watch. Client and OnChange are required.
type WatchConfig struct {
	// Client is the etcd client; the Watcher does not close it.
	Client *clientv3.Client
	// Cluster names the key prefix (default "default").
	Cluster string
	// OnChange gets every live engine, sorted by role then engine id, each
	// time the set changes (and once at the start). Calls never overlap.
	OnChange func([]Record)
	// Logger (default: none).
	Logger *zap.Logger
}

// Watcher follows a cluster's engines.
type Watcher struct {
	cfg     WatchConfig
	log     *zap.Logger
	stop    context.CancelFunc
	done    chan struct{}
	invalid atomic.Uint64

	mu   sync.Mutex
	live map[string]Record // by key
}

// Watch reads the cluster's engines, calls OnChange with them, and follows
// the prefix until Close, calling OnChange on every change. A value that is
// not a valid Record is skipped and counted (Invalid). If the watch breaks
// (etcd unreachable, history compacted) the prefix is read again.
func Watch(ctx context.Context, cfg WatchConfig) (*Watcher, error) {
	if cfg.Client == nil || cfg.OnChange == nil {
		return nil, errors.New("discovery: WatchConfig.Client and OnChange are required")
	}
	if cfg.Cluster == "" {
		cfg.Cluster = "default"
	}
	if !validName(cfg.Cluster) {
		return nil, fmt.Errorf("discovery: cluster %q: want 1 to 200 characters, no '/' or spaces", cfg.Cluster)
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	w := &Watcher{cfg: cfg, log: cfg.Logger, done: make(chan struct{})}
	rev, err := w.load(ctx)
	if err != nil {
		return nil, err
	}
	wctx, stop := context.WithCancel(context.Background())
	w.stop = stop
	go w.run(wctx, rev)
	return w, nil
}

// load reads the whole prefix, replaces the live set and reports it; it
// returns the revision read.
func (w *Watcher) load(ctx context.Context) (int64, error) {
	prefix := Prefix(w.cfg.Cluster)
	resp, err := w.cfg.Client.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return 0, fmt.Errorf("discovery: reading %s: %w", prefix, err)
	}
	live := make(map[string]Record, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		if rec, ok := w.decode(kv); ok {
			live[string(kv.Key)] = rec
		}
	}
	w.mu.Lock()
	w.live = live
	w.mu.Unlock()
	w.report()
	return resp.Header.Revision, nil
}

func (w *Watcher) decode(kv *mvccpb.KeyValue) (Record, bool) {
	rec, err := Decode(w.cfg.Cluster, string(kv.Key), kv.Value)
	if err != nil {
		w.invalid.Add(1)
		w.log.Warn("skipping an engine record", zap.Error(err))
		return Record{}, false
	}
	return rec, true
}

func (w *Watcher) run(ctx context.Context, rev int64) {
	defer close(w.done)
	prefix := Prefix(w.cfg.Cluster)
	for ctx.Err() == nil {
		wch := w.cfg.Client.Watch(clientv3.WithRequireLeader(ctx), prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
		for resp := range wch {
			if err := resp.Err(); err != nil {
				w.log.Warn("etcd watch broke: reading the engines again", zap.Error(err))
				break
			}
			changed := false
			w.mu.Lock()
			for _, ev := range resp.Events {
				key := string(ev.Kv.Key)
				switch ev.Type {
				case mvccpb.PUT:
					if rec, ok := w.decode(ev.Kv); ok {
						w.live[key] = rec
					} else {
						delete(w.live, key) // an invalid value replaces a valid one
					}
					changed = true
				case mvccpb.DELETE:
					delete(w.live, key)
					changed = true
				}
			}
			w.mu.Unlock()
			rev = resp.Header.Revision
			if changed {
				w.report()
			}
		}
		if ctx.Err() != nil {
			return
		}
		// The watch ended (error, compaction, lost leader): start over from
		// a fresh read, once etcd answers.
		for ctx.Err() == nil {
			lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			r, err := w.load(lctx)
			cancel()
			if err == nil {
				rev = r
				break
			}
			w.log.Warn("reading the engines again failed; retrying", zap.Error(err))
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

// report calls OnChange with the live set. Only load (before run starts)
// and run call it, so calls never overlap.
func (w *Watcher) report() {
	w.cfg.OnChange(w.Engines())
}

// Engines returns the live engines, sorted by role then engine id.
func (w *Watcher) Engines() []Record {
	w.mu.Lock()
	out := make([]Record, 0, len(w.live))
	for _, r := range w.live {
		out = append(out, r)
	}
	w.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Role != out[j].Role {
			return out[i].Role < out[j].Role
		}
		return out[i].EngineID < out[j].EngineID
	})
	return out
}

// Invalid counts the values skipped because they were not valid records.
func (w *Watcher) Invalid() uint64 { return w.invalid.Load() }

// Close stops the watch and waits until OnChange is no longer called.
func (w *Watcher) Close() error {
	w.stop()
	<-w.done
	return nil
}
