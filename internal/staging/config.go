package staging

import (
	"fmt"
	"time"

	"github.com/gonixl/gonixl/nixl"
)

// Mode says when a connector stages a request.
type Mode string

// Modes. The zero value is ModeOff: no staging memory is needed.
const (
	// ModeOff never stages: every request moves by direct descriptors.
	ModeOff Mode = ""
	// ModeOn stages every request that fits a slot when a slot is free on
	// both sides, whatever it costs.
	ModeOn Mode = "on"
	// ModeAuto stages a request when the cost model (Model) says staging
	// is cheaper and slots are free.
	ModeAuto Mode = "auto"
)

// Defaults of the cost model.
const (
	// DefaultDescCost is the cost of one NIXL descriptor on the direct path
	// (measured on one H200 with UCX cuda_ipc: 5-8 µs per descriptor).
	DefaultDescCost = 6 * time.Microsecond
	// DefaultVRAMCopyBandwidth is the gather/scatter bandwidth on a GPU in
	// bytes per second (the kernel in gpucopy on one H200: about 2 TB/s).
	DefaultVRAMCopyBandwidth = 2e12
	// DefaultDRAMCopyBandwidth is the same for host memory (memcpy).
	DefaultDRAMCopyBandwidth = 5e9
)

// Config is a rank's staging memory and policy as the connectors run on
// it: package connector's Staging (whose fields are documented there, for
// users) converted, with WithDefaults filling the cost model and the host
// copier. The zero value disables staging.
type Config struct {
	Mode          Mode
	Mem           nixl.MemType
	Base, DevID   uint64
	SlotBytes     uint64
	Slots         int
	Copier        Copier
	DescCost      time.Duration
	CopyBandwidth float64
	MeasureCopy   bool
	TransferChunk uint64
	Chunks        int // 0: DefaultChunks; at most MaxChunks
}

// Enabled reports whether the configuration stages anything.
func (c *Config) Enabled() bool { return c.Mode != ModeOff }

// WithDefaults fills the zero cost-model fields and the host copier.
func (c *Config) WithDefaults() {
	if !c.Enabled() {
		return
	}
	if c.DescCost == 0 {
		c.DescCost = DefaultDescCost
	}
	if c.CopyBandwidth == 0 {
		c.CopyBandwidth = DefaultDRAMCopyBandwidth
		if c.Mem == nixl.VRAM {
			c.CopyBandwidth = DefaultVRAMCopyBandwidth
		}
	}
	if c.Copier == nil && c.Mem == nixl.DRAM {
		c.Copier = HostCopier{}
	}
}

// Validate reports the first unusable field, named as field (for example
// "RankConfig.Staging") sees it; layoutMem is the KV layout's memory type.
func (c *Config) Validate(field string, layoutMem nixl.MemType) error {
	if !c.Enabled() {
		return nil
	}
	switch {
	case c.Mode != ModeOn && c.Mode != ModeAuto:
		return fmt.Errorf("%s.Mode is %q, want %q, %q or %q", field, c.Mode, ModeOff, ModeOn, ModeAuto)
	case c.Mem != layoutMem:
		return fmt.Errorf("%s.Mem is %v, the KV layout is %v", field, c.Mem, layoutMem)
	case c.Base == 0:
		return fmt.Errorf("%s.Base is 0", field)
	case c.SlotBytes == 0 || c.SlotBytes%16 != 0:
		return fmt.Errorf("%s.SlotBytes is %d, want a positive multiple of 16", field, c.SlotBytes)
	case c.Slots < 1 || c.Slots > MaxSlots:
		return fmt.Errorf("%s.Slots is %d, want 1..%d", field, c.Slots, MaxSlots)
	case c.SlotBytes > (1<<62)/uint64(c.Slots) || c.Base > ^uint64(0)-c.SlotBytes*uint64(c.Slots):
		return fmt.Errorf("%s: %d slots of %d bytes from %#x overflow the address space", field, c.Slots, c.SlotBytes, c.Base)
	case c.Copier == nil:
		return fmt.Errorf("%s.Copier is nil: %v staging needs a copier (connector.NewGPUCopier for VRAM)", field, c.Mem)
	case c.Chunks < 0 || c.Chunks > MaxChunks:
		return fmt.Errorf("%s.Chunks is %d, want 0..%d (0: %d)", field, c.Chunks, MaxChunks, DefaultChunks)
	case c.DescCost < 0 || c.CopyBandwidth < 0:
		return fmt.Errorf("%s: DescCost %v and CopyBandwidth %v must not be negative", field, c.DescCost, c.CopyBandwidth)
	}
	return nil
}

// MaxSlots bounds Config.Slots.
const MaxSlots = 1024

// RegList is the registration of the staging memory.
func (c *Config) RegList() nixl.RegList {
	return nixl.RegList{Mem: c.Mem, Descs: []nixl.RegDesc{{Desc: nixl.Desc{Addr: c.Base, Len: c.SlotBytes * uint64(c.Slots), DevID: c.DevID}}}}
}

// Info is what a rank advertises of its staging memory in the handshake,
// so that a peer can check a slot named in a message before it moves bytes
// into or out of it.
type Info struct {
	Base      uint64 `msgpack:"base"`
	DevID     uint64 `msgpack:"dev_id"`
	SlotBytes uint64 `msgpack:"slot_bytes"`
	Slots     int    `msgpack:"slots"`
}

// Info returns the advertised form of c; the zero Info when disabled.
func (c *Config) Info() Info {
	if !c.Enabled() {
		return Info{}
	}
	return Info{Base: c.Base, DevID: c.DevID, SlotBytes: c.SlotBytes, Slots: c.Slots}
}

// Slot returns the address of slot i, or an error naming i when the info
// has no such slot (a peer's message named it).
func (in Info) Slot(i int) (uint64, error) {
	if in.Slots <= 0 || in.SlotBytes == 0 {
		return 0, fmt.Errorf("the peer advertises no staging memory")
	}
	if i < 0 || i >= in.Slots {
		return 0, fmt.Errorf("staging slot %d out of range [0, %d)", i, in.Slots)
	}
	return in.Base + uint64(i)*in.SlotBytes, nil
}

// MeasureCopy returns the copier's bandwidth in bytes per second: up to
// 256 MiB of slot 0 copied onto its other half, once to warm up and then
// three times timed. Slot 0 holds nothing yet when a rank starts.
func MeasureCopy(c *Config) (float64, error) {
	n := min(c.SlotBytes/2, 256<<20) &^ 15
	if n == 0 || c.Copier == nil {
		return 0, fmt.Errorf("staging: cannot measure the copy bandwidth in slots of %d bytes", c.SlotBytes)
	}
	segs := []Seg{{Src: c.Base, Dst: c.Base + n, Len: n}}
	if err := c.Copier.Copy(segs); err != nil {
		return 0, fmt.Errorf("staging: measuring the copy bandwidth: %w", err)
	}
	const reps = 3
	start := time.Now()
	for range reps {
		if err := c.Copier.Copy(segs); err != nil {
			return 0, fmt.Errorf("staging: measuring the copy bandwidth: %w", err)
		}
	}
	return float64(n) * reps / max(time.Since(start).Seconds(), 1e-9), nil
}

// Prepare measures CopyBandwidth when c asks for it (MeasureCopy under
// ModeAuto); the connectors call it when a rank starts.
func Prepare(c *Config) error {
	if !c.MeasureCopy || c.Mode != ModeAuto {
		return nil
	}
	bw, err := MeasureCopy(c)
	if err != nil {
		return err
	}
	c.CopyBandwidth = bw
	return nil
}
