package vllmpeer

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/gonixl/gonixl/internal/pyjson"
)

// HashFactors are the facts vLLM's compute_nixl_compatibility_hash takes
// (docs/vllm.md, "The compatibility hash"). Two engines pair only when the
// SHA-256 of their factors agree.
//
// It repeats internal/vllm.CompatFactors on purpose (the peer imports none of
// internal/vllm, see the package doc); TestPeerAgainstVLLMOracle checks it
// against vLLM 0.34.0's own function.
type HashFactors struct {
	VLLMVersion     string // vllm.__version__, exactly
	Model           string // model_config.model, exactly
	DType           string // str(torch dtype), e.g. "torch.bfloat16"
	NumKVHeads      int    // the model's total KV heads
	HeadSize        int
	NumHiddenLayers int
	AttnBackendName string // e.g. "FLASH_ATTN"
	CacheDType      string // "auto" unless quantised
	HMAEnabled      bool   // true by default on CUDA with NIXL
	TransferMode    string // "pull" or "push"
	// Speculative, when non-nil, is the EAGLE-style draft's dict; nil is
	// JSON null.
	Speculative map[string]any
}

// Hash returns the compatibility hash: sha256 of Python's
// json.dumps(factors, sort_keys=True), lowercase hex.
func (f HashFactors) Hash() (string, error) {
	var spec any
	if f.Speculative != nil {
		spec = f.Speculative
	}
	s, err := pyJSON(map[string]any{
		"vllm_version":           f.VLLMVersion,
		"nixl_connector_version": ConnectorVersion,
		"model":                  f.Model,
		"dtype":                  f.DType,
		"num_kv_heads":           f.NumKVHeads,
		"head_size":              f.HeadSize,
		"num_hidden_layers":      f.NumHiddenLayers,
		"attn_backend_name":      f.AttnBackendName,
		"cache_dtype":            f.CacheDType,
		"is_hma_enabled":         f.HMAEnabled,
		"speculative_config":     spec,
		"transfer_mode":          f.TransferMode,
	})
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:]), nil
}

// pyJSON renders v as Python's json.dumps(v, sort_keys=True) does with its
// defaults: separators ", " and ": ", keys sorted at every level,
// non-ASCII escaped as \uXXXX. It knows the types the factors hold.
func pyJSON(v any) (string, error) {
	var b strings.Builder
	if err := writePyJSON(&b, v); err != nil {
		return "", err
	}
	return b.String(), nil
}

func writePyJSON(b *strings.Builder, v any) error {
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(x))
	case int:
		b.WriteString(strconv.Itoa(x))
	case string:
		pyjson.WriteString(b, x, true)
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			if err := writePyJSON(b, e); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case []int:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(strconv.Itoa(e))
		}
		b.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys) // byte order of UTF-8 is code point order, as Python sorts
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(", ")
			}
			pyjson.WriteString(b, k, true)
			b.WriteString(": ")
			if err := writePyJSON(b, x[k]); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	default:
		return fmt.Errorf("vllmpeer: compatibility hash: a factor of type %T has no JSON form here", v)
	}
	return nil
}
