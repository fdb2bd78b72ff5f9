package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/gonixl/gonixl/examples/discovery"
	"github.com/gonixl/gonixl/examples/proxy/pd"
)

// members turns the registry's records into the proxy's members.
func members(recs []discovery.Record) []pd.Member {
	out := make([]pd.Member, 0, len(recs))
	for _, r := range recs {
		host, port, _ := r.SideChannel() // records are validated when decoded
		out = append(out, pd.Member{Role: r.Role, URL: r.URL(), EngineID: r.EngineID, Incarnation: r.Incarnation,
			Connector: r.Connector, CompatHash: r.CompatHash, Model: r.Model, SideChannelHost: host,
			SideChannelPort: port, TPSize: r.TPSize, PPSize: r.PPSize})
	}
	return out
}

// followRegistry watches the cluster's engines in etcd and hands every change to p; the
// returned function stops the watch and closes the client.
// timeout bounds the first read of the engines.
func followRegistry(p *pd.Proxy, endpoints, cluster string, timeout time.Duration, log *zap.Logger) (func(), error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(endpoints, ","), DialTimeout: timeout, Logger: log.Named("etcd")})
	if err != nil {
		return nil, fmt.Errorf("-etcd %s: %w", endpoints, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	w, err := discovery.Watch(ctx, discovery.WatchConfig{Client: cli, Cluster: cluster, Logger: log.Named("registry"),
		OnChange: func(recs []discovery.Record) {
			log.Debug("registry changed", zap.Int("engines", len(recs)))
			p.SetMembers(members(recs))
		}})
	if err != nil {
		cli.Close()
		return nil, fmt.Errorf("-etcd %s: %w", endpoints, err)
	}
	log.Info("following the engines in etcd", zap.String("prefix", discovery.Prefix(cluster)), zap.Int("engines", len(w.Engines())))
	return func() {
		w.Close()
		cli.Close()
	}, nil
}
