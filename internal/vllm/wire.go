package vllm

import (
	"encoding/binary"
	"errors"
	"math"

	"github.com/gonixl/gonixl/descriptors"
)

// Wire constants shared with vLLM's NIXL connectors.
const (
	// GetMetaMsg is the first element of the side channel's only request;
	// vLLM sends it as msgpack bin.
	GetMetaMsg = "get_meta_msg"
	// PushRegPrefix starts a push registration notification (decode to
	// prefill, over NIXL).
	PushRegPrefix = "PUSH_REG:"
	// HeartbeatPrefix starts a heartbeat notification: "HB:" followed by
	// comma-separated prefill request ids.
	HeartbeatPrefix = "HB:"
	// TransferModePull and TransferModePush are the transfer modes the
	// compatibility hash names (CompatFactors.TransferMode).
	TransferModePull = "pull"
	TransferModePush = "push"
	// SharedRegionGroupID is the region_group_ids entry of a region that
	// several KV-cache groups share.
	SharedRegionGroupID = -1
	// MemTypeVRAM and MemTypeDRAM are the region_mem_types entries of a
	// device and a host buffer.
	MemTypeVRAM = "VRAM"
	MemTypeDRAM = "DRAM"
	// LocalDlistAgentName is the agent name vLLM prepares its local
	// transfer descriptor lists under.
	LocalDlistAgentName = "NIXL_INIT_AGENT"
)

// Bounds on what a decoder accepts. They are far above what vLLM sends and
// keep a peer from making a rank hold more than they allow.
const (
	// MaxRegions bounds the regions of an AgentMetadata (the entries of
	// kv_caches_base_addr and of every per-region list).
	MaxRegions = descriptors.MaxRegions
	// MaxRegionMembers bounds the layer names of one region_members entry.
	MaxRegionMembers = descriptors.MaxLayers
	// MaxStringLen bounds every string field (engine id, layout and
	// backend names, region and layer names, memory types, the
	// compatibility hash), in bytes.
	MaxStringLen = 1024
	// MaxAgentMetadata bounds agent_metadata, the NIXL agent's own blob.
	MaxAgentMetadata = 16 << 20
	// MaxEncodedAgentMetadata bounds an encoded AgentMetadata, and so the
	// agent_metadata_bytes of a HandshakePayload.
	MaxEncodedAgentMetadata = 64 << 20
	// MaxInt bounds the counts, sizes, ids and ranks that are Go ints
	// (device_id, num_blocks, block_size, the parallel sizes and ranks,
	// region_num_blocks and region_group_ids entries), so that arithmetic
	// on them cannot overflow. Addresses and byte lengths are uint64 and
	// take the whole range.
	MaxInt = math.MaxInt32
)

// ErrMalformed is wrapped by every decoding error and by every Validate
// error: the bytes are not a message vLLM's decoder accepts, or the value
// is outside what this package's bounds allow.
var ErrMalformed = errors.New("vllm: malformed message")

// The appenders below write each value in the most compact msgpack form,
// as msgspec's encoder does.

func appendMapLen(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x80|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xde), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, 0xdf), uint32(n))
}

func appendArrayLen(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x90|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xdc), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, 0xdd), uint32(n))
}

func appendStr(b []byte, s string) []byte {
	n := len(s)
	switch {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n <= math.MaxUint8:
		b = append(b, 0xd9, byte(n))
	case n <= math.MaxUint16:
		b = binary.BigEndian.AppendUint16(append(b, 0xda), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, 0xdb), uint32(n))
	}
	return append(b, s...)
}

func appendBin(b []byte, p []byte) []byte {
	n := len(p)
	switch {
	case n <= math.MaxUint8:
		b = append(b, 0xc4, byte(n))
	case n <= math.MaxUint16:
		b = binary.BigEndian.AppendUint16(append(b, 0xc5), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, 0xc6), uint32(n))
	}
	return append(b, p...)
}

func appendUint(b []byte, v uint64) []byte {
	switch {
	case v <= math.MaxInt8:
		return append(b, byte(v))
	case v <= math.MaxUint8:
		return append(b, 0xcc, byte(v))
	case v <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xcd), uint16(v))
	case v <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, 0xce), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xcf), v)
}

// appendInt writes a non-negative v as appendUint does and a negative one
// in the smallest signed form.
func appendInt(b []byte, v int64) []byte {
	switch {
	case v >= 0:
		return appendUint(b, uint64(v))
	case v >= -32:
		return append(b, byte(v))
	case v >= math.MinInt8:
		return append(b, 0xd0, byte(v))
	case v >= math.MinInt16:
		return binary.BigEndian.AppendUint16(append(b, 0xd1), uint16(v))
	case v >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(b, 0xd2), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xd3), uint64(v))
}

func appendFloat64(b []byte, f float64) []byte {
	return binary.BigEndian.AppendUint64(append(b, 0xcb), math.Float64bits(f))
}

func appendNil(b []byte) []byte { return append(b, 0xc0) }
