package connector

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/gonixl/gonixl/internal/engine"
	"github.com/gonixl/gonixl/internal/vllm"
)

// Protocol is the wire an engine speaks with its peers
// (EngineConfig.Protocol).
type Protocol string

// Protocols.
const (
	// ProtocolGonixl is gonixl's own side channel and handshake, with every
	// guarantee docs/correctness.md lists (the default).
	ProtocolGonixl Protocol = ""
	// ProtocolVLLM is vLLM's NIXL connector at its versions 12 to 16
	// (VLLM.ConnectorVersion; its ZMQ side
	// channel, NixlAgentMetadata, compatibility hash and completion
	// counts; PUSH_REG and plain completions for push), so that the engine
	// pairs with vLLM engines, pull (NixlConnector) and push
	// (NixlPushConnector) alike; its guarantees are vLLM's, weaker than
	// gonixl's (docs/vllm.md).
	ProtocolVLLM Protocol = "vllm"
)

// VLLM is what an engine speaking vLLM's protocol must agree on with its
// vLLM peers beyond the model and the geometry: the facts vLLM's
// compatibility hash is made of, and the names its metadata carries.
type VLLM struct {
	// Version is the peers' vLLM version string (vllm.__version__, e.g.
	// "0.27.1"); required.
	Version string
	// AttentionBackend is the peers' attention backend name (e.g.
	// "FLASH_ATTN"); required.
	AttentionBackend string
	// DType is the model's dtype as vLLM prints it (default "torch." +
	// Geometry.DType, e.g. "torch.bfloat16"); CacheDType the KV cache's
	// (default "auto").
	DType      string
	CacheDType string
	// DisableHMA is vLLM's disable_hybrid_kv_cache_manager; false (the
	// hybrid manager on) is vLLM's default on CUDA.
	DisableHMA bool
	// KVCacheLayout is the layout name the metadata carries (default
	// "LBHNC", the name a vLLM worker publishes for its head-major packed
	// layout; a token-major engine, Geometry.Order NHD, publishes "LBNHC").
	// A vLLM peer refuses a name other than its own ("Heterogeneous TP
	// expects same kv_cache_layout"), so set the legacy "HND" only for a
	// vLLM release that still published it (docs/vllm.md).
	KVCacheLayout string
	// Speculative is the peers' EAGLE-style drafting, nil when they draft
	// nothing (or not EAGLE-style; from connector version 16, nil unless
	// the draft uses the target's hidden states): vLLM hashes it into the
	// compatibility hash, so it must be the peers' exact facts.
	Speculative *VLLMSpeculative
	// ConnectorVersion is the peers' NIXL_CONNECTOR_VERSION, which picks
	// the metadata's fields, the hash and how regions pair: 12 to 16
	// (docs/vllm.md lists the release that speaks each). 0 takes the
	// version of the release Version names when it is a listed release
	// (0.31.0 speaks 13, 0.32.0 14, 0.33.0 15, 0.34.0 16), and 16, the
	// newest release's, otherwise (set it for a development build).
	ConnectorVersion int
	// LayerNames are the vLLM names of the model's layers, in gonixl's
	// layer order (Geometry's layers; with Geometry.Groups, group after
	// group): from connector version 13 the metadata lists each region's
	// layers by these names, and from 16 a vLLM peer pairs regions by them,
	// so they must be the names vLLM gives the model's attention (and
	// Mamba) layers. Empty, LayerNameFormat names them.
	LayerNames []string
	// LayerNameFormat formats layer i's name from i (one %d), when
	// LayerNames is empty (default "model.layers.%d.self_attn.attn", the
	// names of Llama-, Qwen2- and Qwen3-style models).
	LayerNameFormat string
}

// VLLMSpeculative is the speculative_config factor of vLLM's
// compatibility hash for an engine that drafts EAGLE-style.
type VLLMSpeculative struct {
	// Method is the drafting method ("eagle", "eagle3", ...), Model the
	// draft model.
	Method string
	Model  string
	// Revision and CodeRevision are the draft's revisions; nil for none
	// (null).
	Revision     *string
	CodeRevision *string
	// ParallelDrafting is the config's parallel_drafting flag.
	ParallelDrafting bool
	// KVCacheDType is the draft's effective KV-cache dtype, as vLLM prints
	// it (say "auto").
	KVCacheDType string
	// AuxiliaryLayerIDs are the EAGLE-3 auxiliary layer ids; nil for none
	// (null).
	AuxiliaryLayerIDs []int
}

// vllmConfig checks cfg for vLLM's protocol with connector conn and returns
// what the engine puts on the wire.
func vllmConfig(cfg EngineConfig, conn engine.Connector) (engine.VLLMConfig, error) {
	v, g := cfg.VLLM, cfg.Geometry
	switch {
	case conn.Mode != vllm.TransferModePull && conn.Mode != vllm.TransferModePush:
		// The transfer mode is one of the hash's factors: both peers of a
		// pair must be pull or both push.
		return engine.VLLMConfig{}, fmt.Errorf("%w: EngineConfig.Protocol is %q: %s has transfer mode %q, vLLM's are %q and %q", conn.ErrInvalid, cfg.Protocol, conn.Name, conn.Mode, vllm.TransferModePull, vllm.TransferModePush)
	case v.Version == "":
		return engine.VLLMConfig{}, fmt.Errorf("%w: EngineConfig.VLLM.Version is empty: vLLM's compatibility hash needs the peers' vLLM version", conn.ErrInvalid)
	case v.AttentionBackend == "":
		return engine.VLLMConfig{}, fmt.Errorf("%w: EngineConfig.VLLM.AttentionBackend is empty: vLLM's compatibility hash needs the peers' attention backend name", conn.ErrInvalid)
	case !g.KVPacked && !g.MLA:
		return engine.VLLMConfig{}, fmt.Errorf("%w: EngineConfig.Geometry.KVPacked is false: vLLM's connector moves each layer's K and V packed in one region (set KVPacked, or MLA)", conn.ErrInvalid)
	case v.DisableHMA && g.Groups != nil && len(*g.Groups) > 0:
		// Without its hybrid KV-cache manager vLLM keeps one group (a
		// sliding window as full attention) and refuses Mamba layers.
		return engine.VLLMConfig{}, fmt.Errorf("%w: EngineConfig.VLLM.DisableHMA is set with %d KV-cache groups (Geometry.Groups): vLLM moves groups only with its hybrid KV-cache manager on (is_hma_enabled)", conn.ErrInvalid, len(*g.Groups))
	}
	w, err := vllmWire(v, g.Layers, conn)
	if err != nil {
		return engine.VLLMConfig{}, err
	}
	f := vllm.CompatFactors{
		ConnectorVersion: w.Version,
		VLLMVersion:      v.Version, Model: cfg.Model, DType: cmp.Or(v.DType, "torch."+g.DType),
		AttnBackendName: v.AttentionBackend, CacheDType: cmp.Or(v.CacheDType, "auto"),
		NumKVHeads: g.KVHeads, HeadSize: g.HeadDim, NumHiddenLayers: g.Layers, HMAEnabled: !v.DisableHMA,
		TransferMode: conn.Mode,
	}
	if s := v.Speculative; s != nil {
		f.SpeculativeConfig = &vllm.SpeculativeConfig{Method: s.Method, Model: s.Model, Revision: s.Revision, CodeRevision: s.CodeRevision,
			ParallelDrafting: s.ParallelDrafting, KVCacheDType: s.KVCacheDType, AuxiliaryLayerIDs: s.AuxiliaryLayerIDs}
	}
	return engine.VLLMConfig{Hash: f.Hash(), AttnBackend: v.AttentionBackend, KVLayout: cmp.Or(v.KVCacheLayout, vllm.LayoutLBHNC), Wire: w}, nil
}

// vllmWire returns the connector version and layer names of v for a model
// of layers layers.
func vllmWire(v VLLM, layers int, conn engine.Connector) (vllm.Wire, error) {
	w := vllm.Wire{Version: vllm.Version(v.ConnectorVersion)}
	if w.Version == 0 {
		var known bool
		if w.Version, known = vllm.VersionOfRelease(v.Version); !known {
			w.Version = vllm.DefaultVersion
		}
	}
	if err := w.Version.Check(); err != nil {
		return vllm.Wire{}, fmt.Errorf("%w: EngineConfig.VLLM.ConnectorVersion: %v", conn.ErrInvalid, err)
	}
	switch {
	case len(v.LayerNames) > 0 && v.LayerNameFormat != "":
		return vllm.Wire{}, fmt.Errorf("%w: EngineConfig.VLLM.LayerNames and LayerNameFormat are both set: give one", conn.ErrInvalid)
	case len(v.LayerNames) > 0:
		if len(v.LayerNames) != layers {
			return vllm.Wire{}, fmt.Errorf("%w: EngineConfig.VLLM.LayerNames has %d names, the model %d layers (Geometry.Layers)", conn.ErrInvalid, len(v.LayerNames), layers)
		}
		seen := make(map[string]int, layers)
		for i, name := range v.LayerNames {
			if j, dup := seen[name]; dup {
				return vllm.Wire{}, fmt.Errorf("%w: EngineConfig.VLLM.LayerNames[%d] and [%d] are both %q", conn.ErrInvalid, j, i, name)
			}
			if name == "" || len(name) > vllm.MaxStringLen {
				return vllm.Wire{}, fmt.Errorf("%w: EngineConfig.VLLM.LayerNames[%d] is %d bytes, want 1 to %d", conn.ErrInvalid, i, len(name), vllm.MaxStringLen)
			}
			seen[name] = i
		}
		w.LayerNames = slices.Clone(v.LayerNames)
	default:
		names, err := vllm.LayerNames(v.LayerNameFormat, layers)
		if err != nil {
			return vllm.Wire{}, fmt.Errorf("%w: EngineConfig.VLLM.LayerNameFormat: %v", conn.ErrInvalid, err)
		}
		w.LayerNames = names
	}
	return w, nil
}
