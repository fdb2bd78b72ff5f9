package discovery_test

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gonixl/gonixl/examples/discovery"
)

// An engine's record, its key, and what a watcher reads back from it.
func ExampleDecode() {
	rec := discovery.Record{EngineID: "prefill-0", Role: "prefill", HTTPAddr: "127.0.0.1:8100",
		SideChannelAddr: "127.0.0.1:5600", Connector: "pull", TPSize: 2, PPSize: 1,
		Model: "Qwen/Qwen2.5-7B-Instruct", CompatHash: "9f2c1d0e8a7b6c5d", Incarnation: "4be1"}
	key := rec.Key("prod")
	fmt.Println(key)
	value := []byte(`{"engine_id":"prefill-0","role":"prefill","http_addr":"127.0.0.1:8100",` +
		`"side_channel_addr":"127.0.0.1:5600","connector":"pull","tp_size":2,"pp_size":1,` +
		`"model":"Qwen/Qwen2.5-7B-Instruct","compat_hash":"9f2c1d0e8a7b6c5d","incarnation":"4be1"}`)
	got, err := discovery.Decode("prod", key, value)
	fmt.Println(got == rec, err)
	_, err = discovery.Decode("prod", "/gonixl/prod/engines/decode/prefill-0", value)
	fmt.Println(err)
	// Output:
	// /gonixl/prod/engines/prefill/prefill-0
	// true <nil>
	// discovery: key "/gonixl/prod/engines/decode/prefill-0" holds the record of prefill engine "prefill-0"
}

// An engine registers itself; a proxy follows every engine of the cluster. (It needs an
// etcd at 127.0.0.1:2379, so it is compiled, not run.)
func ExampleRegister() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:2379"}, DialTimeout: 5 * time.Second})
	if err != nil {
		panic(err)
	}
	defer cli.Close()
	ctx := context.Background()
	rec := discovery.Record{EngineID: "decode-0", Role: "decode", HTTPAddr: "127.0.0.1:8200",
		SideChannelAddr: "127.0.0.1:5601", Connector: "pull", TPSize: 1, PPSize: 1,
		Model: "m", CompatHash: "9f2c1d0e8a7b6c5d", Incarnation: "77aa"}
	reg, err := discovery.Register(ctx, discovery.RegisterConfig{Client: cli, Cluster: "prod", Record: rec, TTL: 5 * time.Second})
	if err != nil {
		panic(err)
	}
	defer reg.Close(ctx) // a graceful shutdown deletes the key at once

	w, err := discovery.Watch(ctx, discovery.WatchConfig{Client: cli, Cluster: "prod",
		OnChange: func(engines []discovery.Record) { fmt.Println(len(engines), "engines") }})
	if err != nil {
		panic(err)
	}
	defer w.Close()
}
