package loopback_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// A prefill agent WRITEs a KV block into a decode agent's memory with a
// notification, and the decode side waits for it — the code under test
// would do the same on a native agent, through the nixl.Agent interface.
func Example() {
	fabric, err := loopback.NewFabric(loopback.WithModel(loopback.FixedLatency(time.Millisecond)))
	if err != nil {
		panic(err)
	}
	defer fabric.Close()
	prefill, _ := fabric.NewAgent("prefill")
	decode, _ := fabric.NewAgent("decode")

	// Memory that agents register lives outside the Go heap.
	src, _ := nixl.AllocBuffer(4096)
	defer src.Free()
	dst, _ := nixl.AllocBuffer(4096)
	defer dst.Free()
	copy(src.Bytes(), "KV block 7")
	if err := prefill.RegisterMem(nixl.RegList{Mem: nixl.DRAM, Descs: []nixl.RegDesc{src.RegDesc()}}, nil); err != nil {
		panic(err)
	}
	if err := decode.RegisterMem(nixl.RegList{Mem: nixl.DRAM, Descs: []nixl.RegDesc{dst.RegDesc()}}, nil); err != nil {
		panic(err)
	}

	// Exchange metadata (a side channel would carry these bytes).
	md, _ := decode.LocalMD()
	peer, err := prefill.LoadRemoteMD(md)
	if err != nil {
		panic(err)
	}

	req, err := prefill.CreateXferReq(nixl.Write,
		nixl.XferList{Mem: nixl.DRAM, Descs: []nixl.Desc{src.Desc(0, 4096)}},
		nixl.XferList{Mem: nixl.DRAM, Descs: []nixl.Desc{dst.Desc(0, 4096)}},
		peer, nixl.NotifOptions([]byte("req-42:1")))
	if err != nil {
		panic(err)
	}
	st, err := prefill.PostXferReq(req, nil)
	fmt.Println("posted:", st, err)

	// Wait, with a deadline, for decode's notification; its bytes are in
	// place before it is visible. As with NIXL, the initiator must poll its
	// request too: the notification leaves when prefill sees the transfer
	// done.
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := prefill.XferStatus(req); err != nil {
			panic(err)
		}
		notifs, err := decode.GetNotifs(nil)
		if err != nil {
			panic(err)
		}
		if msgs := notifs["prefill"]; len(msgs) > 0 {
			fmt.Printf("decode got %q: %s\n", msgs[0], dst.Bytes()[:10])
			break
		}
		if time.Now().After(deadline) {
			fmt.Println("no notification")
			return
		}
		time.Sleep(100 * time.Microsecond)
	}
	st, err = prefill.XferStatus(req)
	fmt.Println("status:", st, err)
	prefill.ReleaseXferReq(req)
	// Output:
	// posted: NIXL_IN_PROG <nil>
	// decode got "req-42:1": KV block 7
	// status: NIXL_SUCCESS <nil>
}

// Faults are rules on the fabric; their effects are counted, so a test can
// check that the code under test saw exactly what was injected.
func ExampleFabric_AddFault() {
	fabric, _ := loopback.NewFabric(loopback.WithSeed(7))
	defer fabric.Close()
	prefill, _ := fabric.NewAgent("prefill")
	decode, _ := fabric.NewAgent("decode")
	md, _ := decode.LocalMD()
	prefill.LoadRemoteMD(md)

	drop, _ := fabric.AddFault(loopback.Fault{Kind: loopback.DropNotif, From: "prefill", To: "decode", Count: 1})
	prefill.GenNotif("decode", []byte("lost"), nil)
	prefill.GenNotif("decode", []byte("kept"), nil)
	notifs, _ := decode.GetNotifs(nil)
	fmt.Printf("%q\n", notifs["prefill"])

	fabric.Disconnect("decode")
	err := prefill.GenNotif("decode", []byte("x"), nil)
	fmt.Println(errors.Is(err, nixl.ErrRemoteDisconnect))

	c := fabric.Counters()
	fmt.Println(fabric.Injected(drop), c.NotifsDropped, c.NotifsDelivered, c.Disconnects)
	// Output:
	// ["kept"]
	// true
	// 1 1 1 1
}
