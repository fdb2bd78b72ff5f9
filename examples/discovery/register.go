package discovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// DefaultTTL is the lease TTL when RegisterConfig.TTL is zero.
const DefaultTTL = 10 * time.Second

// RegisterConfig configures Register. Client and Record are required.
type RegisterConfig struct {
	// Client is the etcd client; the Registration does not close it.
	Client *clientv3.Client
	// Cluster names the key prefix (default "default").
	Cluster string
	// Record is what is published.
	Record Record
	// TTL is the lease's time to live, whole seconds (etcd's unit; default
	// DefaultTTL): a killed engine's key vanishes at most TTL after its last
	// keep-alive.
	TTL time.Duration
	// Logger (default: none).
	Logger *zap.Logger
}

// Registration is an engine's record kept alive in etcd.
type Registration struct {
	cfg  RegisterConfig
	key  string
	val  string
	ttl  int64
	log  *zap.Logger
	stop context.CancelFunc
	done chan struct{}

	mu    sync.Mutex
	lease clientv3.LeaseID
	// renewed counts the times the record had to be put again on a new
	// lease (its lease was lost, e.g. etcd was unreachable longer than TTL).
	renewed int
	once    sync.Once
	err     error
}

// Register puts cfg.Record under its key on a new lease and keeps the lease
// alive until Close (graceful: the key is deleted) or Abandon (as a crash:
// the key stays until the lease expires). If the lease is lost anyway, the
// record is put again on a new one.
func Register(ctx context.Context, cfg RegisterConfig) (*Registration, error) {
	if cfg.Client == nil {
		return nil, errors.New("discovery: RegisterConfig.Client is required")
	}
	if err := cfg.Record.Validate(); err != nil {
		return nil, err
	}
	if cfg.Cluster == "" {
		cfg.Cluster = "default"
	}
	if !validName(cfg.Cluster) {
		return nil, fmt.Errorf("discovery: cluster %q: want 1 to 200 characters, no '/' or spaces", cfg.Cluster)
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.TTL < time.Second {
		return nil, fmt.Errorf("discovery: TTL %s: etcd leases are whole seconds, want >= 1s", cfg.TTL)
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	val, err := json.Marshal(cfg.Record)
	if err != nil {
		return nil, err
	}
	r := &Registration{cfg: cfg, key: cfg.Record.Key(cfg.Cluster), val: string(val),
		ttl: int64(math.Ceil(cfg.TTL.Seconds())), log: cfg.Logger.With(zap.String("key", cfg.Record.Key(cfg.Cluster))),
		done: make(chan struct{})}
	kctx, stop := context.WithCancel(context.Background())
	ka, err := r.put(ctx, kctx)
	if err != nil {
		stop()
		return nil, err
	}
	r.stop = stop
	go r.keepAlive(kctx, ka)
	return r, nil
}

// put grants a lease, puts the record on it and starts its keep-alives,
// which last until kctx ends.
func (r *Registration) put(ctx, kctx context.Context) (<-chan *clientv3.LeaseKeepAliveResponse, error) {
	g, err := r.cfg.Client.Grant(ctx, r.ttl)
	if err != nil {
		return nil, fmt.Errorf("discovery: granting a %d s lease: %w", r.ttl, err)
	}
	if _, err := r.cfg.Client.Put(ctx, r.key, r.val, clientv3.WithLease(g.ID)); err != nil {
		_, _ = r.cfg.Client.Revoke(context.WithoutCancel(ctx), g.ID)
		return nil, fmt.Errorf("discovery: putting %s: %w", r.key, err)
	}
	r.mu.Lock()
	r.lease = g.ID
	r.mu.Unlock()
	ka, err := r.cfg.Client.KeepAlive(kctx, g.ID)
	if err != nil {
		_, _ = r.cfg.Client.Revoke(context.WithoutCancel(ctx), g.ID)
		return nil, fmt.Errorf("discovery: keeping lease %x alive: %w", g.ID, err)
	}
	return ka, nil
}

// keepAlive drains the keep-alive answers; when the channel closes before
// Close, the lease is lost and the record is put again.
func (r *Registration) keepAlive(ctx context.Context, ka <-chan *clientv3.LeaseKeepAliveResponse) {
	defer close(r.done)
	for {
		for range ka {
		}
		if ctx.Err() != nil {
			return
		}
		r.log.Warn("etcd lease lost: registering again")
		for {
			pctx, cancel := context.WithTimeout(ctx, time.Duration(r.ttl)*time.Second)
			next, err := r.put(pctx, ctx)
			cancel()
			if err == nil {
				r.mu.Lock()
				r.renewed++
				r.mu.Unlock()
				ka = next
				break
			}
			if ctx.Err() != nil {
				return
			}
			r.log.Warn("registering again failed; retrying", zap.Error(err))
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	}
}

// Key returns the record's key.
func (r *Registration) Key() string { return r.key }

// Lease returns the current lease's id.
func (r *Registration) Lease() clientv3.LeaseID {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lease
}

// Renewed returns how many times the record was put again on a new lease.
func (r *Registration) Renewed() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.renewed
}

// Close stops the keep-alives, deletes the key and revokes the lease (a
// graceful shutdown: watchers see the engine leave at once). It is
// idempotent; later calls return the first one's error.
func (r *Registration) Close(ctx context.Context) error {
	r.once.Do(func() {
		r.stop()
		<-r.done
		lease := r.Lease()
		_, derr := r.cfg.Client.Delete(ctx, r.key)
		_, rerr := r.cfg.Client.Revoke(ctx, lease)
		if errors.Is(rerr, rpctypes.ErrLeaseNotFound) {
			rerr = nil // it expired first (keep-alives late on a loaded host): the key went with it
		}
		if derr != nil || rerr != nil {
			r.err = fmt.Errorf("discovery: deregistering %s: %w", r.key, errors.Join(derr, rerr))
		}
	})
	return r.err
}

// Abandon stops the keep-alives and leaves the key to expire with its lease,
// as when the engine is killed. It is idempotent.
func (r *Registration) Abandon() {
	r.once.Do(func() {
		r.stop()
		<-r.done
	})
}
