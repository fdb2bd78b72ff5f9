package vllm

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"

	"github.com/gonixl/gonixl/internal/pyjson"
)

// CompatFactors are the facts vLLM's compute_nixl_compatibility_hash hashes;
// two engines whose hashes differ refuse each other at the handshake
// (unless the vLLM side sets enforce_handshake_compat to false). Each
// string must be exactly what the vLLM peer has: a Go peer must be told
// its counterpart's version string, model string and backend name, or be
// given its hash.
type CompatFactors struct {
	// ConnectorVersion ("nixl_connector_version") is the version both
	// peers speak; it also picks the speculative factors hashed.
	ConnectorVersion Version
	// VLLMVersion ("vllm_version") is vllm.__version__ in full, e.g.
	// "0.27.1" or a "….devN+g<sha>" string; "dev" when unknown.
	VLLMVersion string
	// Model ("model") is the model as given to vLLM: its HF id or path.
	Model string
	// DType ("dtype") is str(model dtype), e.g. "torch.bfloat16".
	DType string
	// AttnBackendName ("attn_backend_name") is the first attention
	// backend's name, e.g. "FLASH_ATTN".
	AttnBackendName string
	// CacheDType ("cache_dtype") is str(cache dtype), e.g. "auto", "fp8".
	CacheDType string
	// NumKVHeads ("num_kv_heads"), HeadSize ("head_size") and
	// NumHiddenLayers ("num_hidden_layers") are the model's totals, not
	// one rank's share.
	NumKVHeads      int
	HeadSize        int
	NumHiddenLayers int
	// HMAEnabled ("is_hma_enabled") is whether the hybrid KV-cache manager
	// is on (vLLM's default with NIXL on CUDA).
	HMAEnabled bool
	// SpeculativeConfig ("speculative_config") is nil (null) unless the
	// engine drafts EAGLE-style.
	SpeculativeConfig *SpeculativeConfig
	// TransferMode ("transfer_mode") is TransferModePull or
	// TransferModePush.
	TransferMode string
}

// SpeculativeConfig is the speculative_config factor of an EAGLE-style
// drafting engine.
type SpeculativeConfig struct {
	Method       string  // "method"
	Model        string  // "model"
	Revision     *string // "revision", nil = null
	CodeRevision *string // "code_revision", nil = null
	// ParallelDrafting ("parallel_drafting") is hashed up to version 15;
	// from 16 vLLM leaves it out.
	ParallelDrafting bool
	KVCacheDType     string // "kv_cache_dtype", the effective one
	// AuxiliaryLayerIDs ("auxiliary_layer_ids") is nil for null.
	AuxiliaryLayerIDs []int
}

// Hash returns the compatibility hash: the lowercase hex SHA-256 of JSON's
// UTF-8 bytes, as vLLM's hash_factors computes it.
func (f CompatFactors) Hash() string {
	sum := sha256.Sum256([]byte(f.JSON()))
	return hex.EncodeToString(sum[:])
}

// JSON returns the exact string that Hash hashes: what Python's
// json.dumps(factors, sort_keys=True) writes for vLLM's factor dict, with
// the default separators ", " and ": ", keys sorted at every level,
// non-ASCII characters escaped as \uXXXX (surrogate pairs above U+FFFF),
// and nixl_connector_version f.ConnectorVersion. Bytes of a string that are
// not UTF-8 are written as U+FFFD (a Python string cannot hold them).
func (f CompatFactors) JSON() string {
	var spec any // null
	if s := f.SpeculativeConfig; s != nil {
		o := jsonObject{
			{"method", s.Method},
			{"model", s.Model},
			{"revision", s.Revision},
			{"code_revision", s.CodeRevision},
			{"kv_cache_dtype", s.KVCacheDType},
			{"auxiliary_layer_ids", s.AuxiliaryLayerIDs},
		}
		if f.ConnectorVersion < V16 {
			// nixl/metadata.py @ vllm 0.33.0 hashes it; @ 0.34.0 not.
			o = append(o, jsonMember{"parallel_drafting", s.ParallelDrafting})
		}
		spec = o
	}
	var b strings.Builder
	writeJSON(&b, jsonObject{
		{"vllm_version", f.VLLMVersion},
		{"nixl_connector_version", int(f.ConnectorVersion)},
		{"model", f.Model},
		{"dtype", f.DType},
		{"num_kv_heads", f.NumKVHeads},
		{"head_size", f.HeadSize},
		{"num_hidden_layers", f.NumHiddenLayers},
		{"attn_backend_name", f.AttnBackendName},
		{"cache_dtype", f.CacheDType},
		{"is_hma_enabled", f.HMAEnabled},
		{"speculative_config", spec},
		{"transfer_mode", f.TransferMode},
	})
	return b.String()
}

// jsonObject is a JSON object; writeJSON sorts its members by key.
type jsonObject []jsonMember

type jsonMember struct {
	key   string
	value any
}

// writeJSON writes v as Python's json.dumps(v, sort_keys=True) does, for
// the few types the factors hold.
func writeJSON(b *strings.Builder, v any) {
	switch v := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(v))
	case int:
		b.WriteString(strconv.Itoa(v))
	case string:
		pyjson.WriteString(b, v, true)
	case *string:
		if v == nil {
			b.WriteString("null")
		} else {
			pyjson.WriteString(b, *v, true)
		}
	case []int:
		if v == nil {
			b.WriteString("null")
			return
		}
		b.WriteByte('[')
		for i, x := range v {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(strconv.Itoa(x))
		}
		b.WriteByte(']')
	case jsonObject:
		// Python compares str keys by code point; Go's byte order of UTF-8
		// is the same order.
		members := slices.SortedFunc(slices.Values(v), func(x, y jsonMember) int { return strings.Compare(x.key, y.key) })
		b.WriteByte('{')
		for i, m := range members {
			if i > 0 {
				b.WriteString(", ")
			}
			pyjson.WriteString(b, m.key, true)
			b.WriteString(": ")
			writeJSON(b, m.value)
		}
		b.WriteByte('}')
	default:
		panic("vllm: writeJSON: unsupported type") // only this file builds values
	}
}
