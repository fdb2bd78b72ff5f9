// Command agentdemo shows the native NIXL binding end to end: it creates two
// agents in one process, lists NIXL's plugins, gives each agent a UCX
// backend, and moves a buffer from one agent to the other with a WRITE and a
// notification, checking the bytes that arrived.
//
// It needs gonixl built with NIXL:
//
//	go run -tags nixl ./examples/agentdemo
//
// Without the tag it says so and exits with status 2.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/gonixl/gonixl/nixl"
)

func main() {
	size := flag.Int("size", 4<<20, "bytes to move")
	timeout := flag.Duration("timeout", 30*time.Second, "give up after this long")
	flag.Parse()

	err := run(*size, *timeout)
	switch {
	case errors.Is(err, nixl.ErrUnavailable):
		fmt.Fprintf(os.Stderr, "agentdemo: %v\nagentdemo needs the native NIXL agent: run it as `go run -tags nixl ./examples/agentdemo` with NIXL installed (see docs/binding.md).\n", err)
		os.Exit(2)
	case err != nil:
		fmt.Fprintf(os.Stderr, "agentdemo: %v\n", err)
		os.Exit(1)
	}
}

func run(size int, timeout time.Duration) error {
	if size <= 0 {
		return fmt.Errorf("-size must be positive, got %d", size)
	}
	sender, err := nixl.New("agentdemo-sender", nixl.Config{})
	if err != nil {
		return err
	}
	defer sender.Close()
	receiver, err := nixl.New("agentdemo-receiver", nixl.Config{})
	if err != nil {
		return err
	}
	defer receiver.Close()

	plugins, err := sender.AvailPlugins()
	if err != nil {
		return err
	}
	fmt.Printf("NIXL plugins: %v\n", plugins)
	mems, params, err := sender.PluginParams("UCX")
	if err != nil {
		return fmt.Errorf("the UCX plugin is needed: %w", err)
	}
	fmt.Printf("UCX supports %v; parameters: %s\n", mems, formatParams(params))

	// Without error handling UCX may use shared memory between the two
	// agents of this process instead of TCP.
	ucx := map[string]string{"ucx_error_handling_mode": "none"}
	for _, a := range []*nixl.NativeAgent{sender, receiver} {
		if err := a.CreateBackend("UCX", ucx); err != nil {
			return err
		}
	}

	src, err := nixl.AllocBuffer(size)
	if err != nil {
		return err
	}
	defer src.Free()
	dst, err := nixl.AllocBuffer(size)
	if err != nil {
		return err
	}
	defer dst.Free()
	for i, p := 0, src.Bytes(); i < len(p); i++ {
		p[i] = byte(i*31 + i>>8)
	}

	// Register, then exchange metadata both ways. The agents are closed
	// (deferred above, so before the buffers are freed) rather than the
	// memory deregistered one by one.
	if err := sender.RegisterMem(nixl.RegList{Mem: nixl.DRAM, Descs: []nixl.RegDesc{src.RegDesc()}}, nil); err != nil {
		return err
	}
	if err := receiver.RegisterMem(nixl.RegList{Mem: nixl.DRAM, Descs: []nixl.RegDesc{dst.RegDesc()}}, nil); err != nil {
		return err
	}
	if err := exchange(sender, receiver); err != nil {
		return err
	}

	msg := []byte("agentdemo: buffer written")
	req, err := sender.CreateXferReq(nixl.Write,
		nixl.XferList{Mem: nixl.DRAM, Descs: []nixl.Desc{src.Desc(0, uint64(size))}},
		nixl.XferList{Mem: nixl.DRAM, Descs: []nixl.Desc{dst.Desc(0, uint64(size))}},
		receiver.Name(), nixl.NotifOptions(msg))
	if err != nil {
		return err
	}
	defer sender.ReleaseXferReq(req)

	start := time.Now()
	if _, err := sender.PostXferReq(req, nil); err != nil {
		return err
	}
	// Neither agent has a progress thread, so both are polled while waiting:
	// the sender for completion, the receiver for the notification.
	deadline := start.Add(timeout)
	done, got := false, [][]byte(nil)
	for !done || len(got) == 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("transfer not finished after %s (done=%v, notifications=%d)", timeout, done, len(got))
		}
		if !done {
			s, err := sender.XferStatus(req)
			if err != nil {
				return err
			}
			done = s == nixl.StatusSuccess
		}
		n, err := receiver.GetNotifs(nil)
		if err != nil {
			return err
		}
		got = append(got, n[sender.Name()]...)
	}
	elapsed := time.Since(start)

	if !bytes.Equal(src.Bytes(), dst.Bytes()) {
		return errors.New("the receiver's buffer differs from the sender's")
	}
	if len(got) != 1 || !bytes.Equal(got[0], msg) {
		return fmt.Errorf("receiver got notifications %q, want exactly %q", got, msg)
	}
	backend, err := sender.QueryXferBackend(req)
	if err != nil {
		return err
	}
	fmt.Printf("moved %d bytes %s -> %s over %s in %s (%.0f MB/s), bytes verified\n",
		size, sender.Name(), receiver.Name(), backend, elapsed.Round(time.Microsecond), float64(size)/elapsed.Seconds()/1e6)
	fmt.Printf("%s received notification %q\n", receiver.Name(), got[0])
	return nil
}

// exchange loads each agent's metadata into the other, as a side channel
// between two processes would.
func exchange(a, b *nixl.NativeAgent) error {
	for _, p := range [][2]*nixl.NativeAgent{{a, b}, {b, a}} {
		md, err := p[0].LocalMD()
		if err != nil {
			return err
		}
		if _, err := p[1].LoadRemoteMD(md); err != nil {
			return err
		}
	}
	return nil
}

func formatParams(p map[string]string) string {
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b bytes.Buffer
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s=%q", k, p[k])
	}
	return b.String()
}
