package vllmpeer

import (
	"bytes"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// Wire constants of vLLM's NIXL connector (docs/vllm.md).
const (
	// ConnectorVersion is NIXL_CONNECTOR_VERSION, which the compatibility
	// hash carries.
	ConnectorVersion = 12
	getMetaMsg       = "get_meta_msg" // sent as msgpack bin, not str
	pushRegPrefix    = "PUSH_REG:"
	heartbeatPrefix  = "HB:"
)

// handshakePayload is vLLM's NixlHandshakePayload: a dataclass, so msgspec
// writes it as a map of its fields in declaration order. The agent metadata
// travels as opaque bytes so that a receiver can check the hash before it
// decodes anything else.
type handshakePayload struct {
	CompatibilityHash  string `msgpack:"compatibility_hash"`
	AgentMetadataBytes []byte `msgpack:"agent_metadata_bytes"`
}

// agentMetadata is vLLM's NixlAgentMetadata at version 12: 19 fields, every
// one written, in this order. The region_* lists are None (nil) when not
// sent; region_members is an empty list from a pull worker.
type agentMetadata struct {
	EngineID                 string     `msgpack:"engine_id"`
	AgentMetadata            []byte     `msgpack:"agent_metadata"`
	KVCachesBaseAddr         []uint64   `msgpack:"kv_caches_base_addr"`
	DeviceID                 int        `msgpack:"device_id"`
	NumBlocks                int        `msgpack:"num_blocks"`
	BlockLens                []uint64   `msgpack:"block_lens"`
	BlockStrides             []uint64   `msgpack:"block_strides"`
	KVCacheLayout            string     `msgpack:"kv_cache_layout"`
	BlockSize                int        `msgpack:"block_size"`
	SSMSizes                 [2]int     `msgpack:"ssm_sizes"`
	AttnBackendName          string     `msgpack:"attn_backend_name"`
	PhysicalBlocksPerLogical int        `msgpack:"physical_blocks_per_logical_kv_block"`
	RegionNumBlocks          []int      `msgpack:"region_num_blocks"`
	RegionGroupIDs           []int      `msgpack:"region_group_ids"`
	RegionNames              []string   `msgpack:"region_names"`
	RegionMemTypes           []string   `msgpack:"region_mem_types"`
	DCPSize                  int        `msgpack:"dcp_size"`
	PCPSize                  int        `msgpack:"pcp_size"`
	RegionMembers            [][]string `msgpack:"region_members"`
}

// pushReg is the map after "PUSH_REG:": a plain dict in vLLM, whose
// insertion order is this declaration order (11 keys).
type pushReg struct {
	RequestID      string  `msgpack:"request_id"`
	DecodeEngineID string  `msgpack:"decode_engine_id"`
	DecodeHost     string  `msgpack:"decode_host"`
	DecodePort     int     `msgpack:"decode_port"`
	DecodeTPSize   int     `msgpack:"decode_tp_size"`
	LocalBlockIDs  [][]int `msgpack:"local_block_ids"`
	RemoteEngineID string  `msgpack:"remote_engine_id"`
	RemoteHost     string  `msgpack:"remote_host"`
	RemotePort     int     `msgpack:"remote_port"`
	RemoteTPSize   int     `msgpack:"remote_tp_size"`
	RemotePPSize   int     `msgpack:"remote_pp_size"`
}

// encode writes v as msgspec does: ints in their smallest form, floats as
// float64, structs as maps in field order.
func encode(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.UseCompactInts(true)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// getMetaRequest is the one frame a REQ client sends: [bin "get_meta_msg",
// pp_rank, tp_rank].
func getMetaRequest(ppRank, tpRank int) ([]byte, error) {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.UseCompactInts(true)
	if err := enc.EncodeArrayLen(3); err != nil {
		return nil, err
	}
	if err := enc.EncodeBytes([]byte(getMetaMsg)); err != nil {
		return nil, err
	}
	if err := enc.EncodeInt(int64(ppRank)); err != nil {
		return nil, err
	}
	if err := enc.EncodeInt(int64(tpRank)); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// parseGetMeta reads a GET_META_MSG request. Like vLLM's listener it
// decodes without a schema and wants exactly three elements; unlike it, a
// malformed request is an error for this one request, not the end of the
// listener.
func parseGetMeta(b []byte) (ppRank, tpRank int, err error) {
	var v []any
	if err := msgpack.Unmarshal(b, &v); err != nil {
		return 0, 0, fmt.Errorf("vllmpeer: GET_META_MSG request: %w", err)
	}
	if len(v) != 3 {
		return 0, 0, fmt.Errorf("vllmpeer: GET_META_MSG request has %d elements, want 3", len(v))
	}
	switch m := v[0].(type) {
	case []byte:
		if string(m) != getMetaMsg {
			return 0, 0, fmt.Errorf("vllmpeer: GET_META_MSG request: element 0 is %q, want %q", m, getMetaMsg)
		}
	case string: // vLLM only warns about a str, and answers
		if m != getMetaMsg {
			return 0, 0, fmt.Errorf("vllmpeer: GET_META_MSG request: element 0 is %q, want %q", m, getMetaMsg)
		}
	default:
		return 0, 0, fmt.Errorf("vllmpeer: GET_META_MSG request: element 0 is a %T, want bin %q", v[0], getMetaMsg)
	}
	pp, ok1 := asInt(v[1])
	tp, ok2 := asInt(v[2])
	if !ok1 || !ok2 {
		return 0, 0, fmt.Errorf("vllmpeer: GET_META_MSG request: ranks are %T and %T, want ints", v[1], v[2])
	}
	return pp, tp, nil
}

func asInt(v any) (int, bool) {
	switch n := v.(type) {
	case int8:
		return int(n), true
	case int16:
		return int(n), true
	case int32:
		return int(n), true
	case int64:
		return int(n), true
	case uint8:
		return int(n), true
	case uint16:
		return int(n), true
	case uint32:
		return int(n), true
	case uint64:
		if n > 1<<31 {
			return 0, false
		}
		return int(n), true
	}
	return 0, false
}

// parseTimestamp reads the reply's second frame. vLLM decodes it without a
// schema, so any msgpack number is accepted.
func parseTimestamp(b []byte) (float64, error) {
	var v any
	if err := msgpack.Unmarshal(b, &v); err != nil {
		return 0, fmt.Errorf("vllmpeer: handshake timestamp frame: %w", err)
	}
	switch n := v.(type) {
	case float64:
		return n, nil
	case float32:
		return float64(n), nil
	}
	if i, ok := asInt(v); ok {
		return float64(i), nil
	}
	return 0, fmt.Errorf("vllmpeer: handshake timestamp frame holds a %T, want a number", v)
}
