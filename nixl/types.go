package nixl

import "fmt"

// MemType is the kind of memory a descriptor names (nixl_mem_t).
type MemType int32

// Memory types, in the order and with the values of nixl_mem_t.
const (
	DRAM MemType = iota // host memory (DRAM_SEG)
	VRAM                // GPU memory (VRAM_SEG)
	BLK                 // block device (BLK_SEG)
	OBJ                 // object store (OBJ_SEG)
	FILE                // file, DevID is the file descriptor (FILE_SEG)
)

// String returns the NIXL name of the memory type.
func (m MemType) String() string {
	switch m {
	case DRAM:
		return "DRAM"
	case VRAM:
		return "VRAM"
	case BLK:
		return "BLK"
	case OBJ:
		return "OBJ"
	case FILE:
		return "FILE"
	}
	return fmt.Sprintf("MemType(%d)", int32(m))
}

// XferOp is the direction of a transfer, seen from the initiator (nixl_xfer_op_t).
type XferOp int32

// Transfer operations, with the values of nixl_xfer_op_t.
const (
	Read  XferOp = iota // pull remote memory into local memory (NIXL_READ)
	Write               // push local memory into remote memory (NIXL_WRITE)
)

// String returns "READ" or "WRITE".
func (o XferOp) String() string {
	switch o {
	case Read:
		return "READ"
	case Write:
		return "WRITE"
	}
	return fmt.Sprintf("XferOp(%d)", int32(o))
}

// Desc names a contiguous range of memory in a transfer (nixlBasicDesc).
// For DRAM and VRAM Addr is a virtual address; for FILE, DevID is the file
// descriptor and Addr the offset.
type Desc struct {
	Addr  uint64
	Len   uint64
	DevID uint64
}

// End returns the first address past the range.
func (d Desc) End() uint64 { return d.Addr + d.Len }

// RegDesc names memory to register, with optional backend metadata such as an
// object key (nixlBlobDesc).
type RegDesc struct {
	Desc
	Meta []byte
}

// XferList is a list of transfer descriptors of one memory type (nixl_xfer_dlist_t).
type XferList struct {
	Mem   MemType
	Descs []Desc
}

// RegList is a list of registration descriptors of one memory type (nixl_reg_dlist_t).
type RegList struct {
	Mem   MemType
	Descs []RegDesc
}

// TotalBytes returns the sum of the descriptor lengths.
func (l XferList) TotalBytes() uint64 {
	var n uint64
	for _, d := range l.Descs {
		n += d.Len
	}
	return n
}

// XferHandle identifies a transfer request created by an agent (nixlXferReqH).
// The zero value is never a valid handle. Handles are plain numbers so that no
// C pointer ever reaches Go code: a stale or foreign handle gives an error
// instead of undefined behaviour.
type XferHandle uint64

// DlistHandle identifies a prepared descriptor list (nixlDlistH).
// The zero value is never a valid handle.
type DlistHandle uint64

// Notifs maps a remote agent's name to the notifications received from it, in
// the order that agent sent them (nixl_notifs_t).
type Notifs map[string][][]byte

// Count returns the total number of messages.
func (n Notifs) Count() int {
	c := 0
	for _, m := range n {
		c += len(m)
	}
	return c
}

// Options are the optional arguments of most agent calls (nixl_opt_args_t).
// A nil *Options means NIXL's defaults. Which fields a call reads is said in
// the call's documentation, as in NIXL.
type Options struct {
	// Backends limits the call to these backends, by the name given to
	// CreateBackend ("UCX", "POSIX", ...). Empty means all that apply.
	Backends []string
	// Notif, when non-nil, is the notification delivered to the remote agent
	// once the transfer's data has arrived; an empty non-nil slice sends an
	// empty notification. In PostXferReq it overrides the message given when
	// the request was created.
	Notif []byte
	// SkipDescMerge keeps consecutive descriptors separate in MakeXferReq.
	SkipDescMerge bool
	// IncludeConnInfo adds connection info to partial metadata. NIXL's C API
	// cannot ask for it: the default build (over the C API) refuses it with
	// ErrNotSupported; the nixlcxx build passes it.
	IncludeConnInfo bool
	// IPAddr and Port address a peer's listener for SendLocalMD,
	// SendLocalPartialMD, FetchRemoteMD and InvalidateLocalMD. Port 0 means
	// NIXL's default, 8888.
	IPAddr string
	Port   int
	// MetadataLabel labels metadata in a metadata server (FetchRemoteMD,
	// SendLocalPartialMD). Like IncludeConnInfo, ErrNotSupported over the C
	// API.
	MetadataLabel string
	// CustomParam is passed to the backend unchanged; over the C API only
	// where NIXL's library has it (1.5), else ErrNotSupported.
	CustomParam []byte
}

// NotifOptions returns options that carry only the notification msg.
func NotifOptions(msg []byte) *Options {
	if msg == nil {
		msg = []byte{}
	}
	return &Options{Notif: msg}
}
