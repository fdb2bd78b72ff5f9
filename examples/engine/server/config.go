package server

import (
	"cmp"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/examples/render/chat"
	"github.com/gonixl/gonixl/nixl"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// Roles and connectors.
const (
	RolePrefill = "prefill" // vLLM's kv_producer
	RoleDecode  = "decode"  // vLLM's kv_consumer
	ConnPull    = "pull"
	ConnPush    = "push"
)

// Defaults for zero Config fields.
const (
	DefaultNumBlocks      = 512
	DefaultMaxBatch       = 64
	DefaultMaxWaiting     = 4096
	DefaultRequestTimeout = 60 * time.Second
	DefaultMaxTokens      = 16
	// DefaultPrefillTokenBudget bounds the prompt tokens one engine step
	// prefills (vLLM's max_num_batched_tokens); a longer prompt runs alone.
	DefaultPrefillTokenBudget = 8192
	// VocabSize is Config.VocabSize's default. The engine's own tokens
	// (Tokenize, outputToken) stay below it whatever the Config says.
	VocabSize = 32000
)

// Config configures a simulated engine. NewAgent is required; every other
// zero field takes its default.
type Config struct {
	// Role is "prefill" (kv_producer) or "decode" (kv_consumer).
	Role string
	// Connector is "pull" or "push".
	Connector string
	// Protocol is the wire the connector speaks with peer engines:
	// ProtocolGonixl (default) or ProtocolVLLM, vLLM's NIXL connector
	// (version 12, pull only), whose side channel then runs on
	// SideChannelPort as a vLLM instance's does (docs/vllm.md). VLLMVersion,
	// AttentionBackend and VLLMModel (default Model.Name) are the vLLM
	// peers' exact strings, which its compatibility hash is made of.
	Protocol                                 string
	VLLMVersion, AttentionBackend, VLLMModel string
	// VLLMConnectorVersion is the vLLM peers' NIXL_CONNECTOR_VERSION
	// (connector.VLLM.ConnectorVersion; 0: the one VLLMVersion's release
	// speaks, else the newest release's).
	VLLMConnectorVersion int
	// Inline (pull decode) posts READs on the engine loop
	// (pullconn.Config.Inline), as vLLM does today.
	Inline bool
	// EngineID names the engine (default: role + random hex).
	EngineID string
	// ServedModelName is what /v1/models lists and requests must name
	// (default Model.Name).
	ServedModelName string
	// Model is the model geometry (default: Preset("qwen2.5-7b")).
	Model ModelSpec
	// Compute is the modeled compute time (zero: no sleep at all).
	Compute ComputeModel
	// TPSize is the tensor-parallel size (default Model.TPSize, else 1).
	TPSize int
	// PPSize is the pipeline-parallel size of a push prefill engine
	// (default 1): PPSize stages of TPSize ranks, each stage's ranks
	// holding their share of the layers and writing those into decode.
	// Pull and decode engines refuse more than 1.
	PPSize int
	// NumBlocks is the number of KV blocks per rank (default 512).
	NumBlocks int
	// HTTPAddr is the HTTP listen address (default "127.0.0.1:0").
	HTTPAddr string
	// SideChannelHost and SideChannelPort are the connector's side channel
	// (defaults: port 0, a free one; host 127.0.0.1, or in vLLM's protocol
	// vLLM's "localhost", which the side channel resolves to an address
	// before it binds, since libzmq cannot bind tcp://localhost:N). The
	// engine command's default port is vLLM's, 5600.
	SideChannelHost string
	SideChannelPort int
	// DataParallelIndex is added to a non-zero SideChannelPort, as vLLM
	// adds its data-parallel index to VLLM_NIXL_SIDE_CHANNEL_PORT: the
	// engines of one data-parallel deployment share the base port. It must
	// be 0..65535 and keep the port within 1..65535.
	DataParallelIndex int
	// NewAgent makes one NIXL agent per TP rank; required. The server owns
	// and closes the agents.
	NewAgent func(name string) (nixl.Agent, error)
	// MaxBatch bounds the requests decoding (or prefilling) at once
	// (default 64).
	MaxBatch int
	// MaxWaiting bounds the requests queued for blocks; more get 503
	// (default 4096).
	MaxWaiting int
	// RequestTimeout bounds every wait of a request: for blocks, for its KV
	// (default 60 s).
	RequestTimeout time.Duration
	// PrefillTokenBudget bounds the prompt tokens prefilled per step
	// (default 8192).
	PrefillTokenBudget int
	// ProgressChunk (a push prefill engine) computes each prompt in chunks
	// of this many tokens, as chunked prefill does, and reports after each
	// chunk the blocks it made final to the connector
	// (connector.ProgressReporter), which moves them to decode while the
	// next chunk computes (progressive push). 0: the prompt in one piece,
	// reported finished only. Pull has no progress to report: refused.
	ProgressChunk int
	// ProgressLayers (a push prefill engine) reports progress per layer as
	// well: each chunk's modeled time is split evenly over the model's
	// layers, and after each layer the chunk's blocks are reported final
	// in the layers done (connector.Request.FinalLayers), as a forward
	// pass that WRITEs each layer's KV as it is computed (vLLM #56874).
	// Without ProgressChunk the prompt is one chunk: per-layer reports of
	// a prefill that is not chunked. Pull: refused.
	ProgressLayers bool
	// Staging gives every rank staging slots for fragmented requests
	// (connector.Staging, RankConfig.Staging): Slots x SlotBytes of host
	// memory per rank, which the server allocates (Mem and Base are its to
	// set) and frees on Close; Mode, Copier, Chunks and the cost model as
	// connector.Staging says. The zero value stages nothing.
	Staging connector.Staging
	// Clock is the time source for timestamps and connector deadlines
	// (default connector.SystemClock{}). Modeled compute sleeps in real time.
	Clock connector.Clock
	// Logger (default: zap.NewNop()).
	Logger *zap.Logger
	// KVHook, for tests, is called on a prefill engine, for requests with
	// do_remote_decode, after the engine wrote the request's KV into a rank's
	// blocks and before RequestFinished; it may change mem (the rank's whole
	// KV buffer, l describes it). requestID is the engine's id (X-Request-Id
	// + "-" + 8 hex digits).
	KVHook func(requestID string, rank int, l descriptors.Layout, blocks []int, mem []byte)
	// FailurePolicy (decode) is what a failed KV load does: "fail" (the
	// default, vLLM's: the request answers 500) or "recompute" (the engine
	// prefills the prompt itself, vLLM's kv_load_failure_policy=recompute).
	FailurePolicy string
	// Lease (prefill) is how long finished blocks wait for decode (default:
	// the connector's, 30 s).
	Lease time.Duration
	// Bidirectional (pull) turns on bidirectional KV for multi-turn chats
	// (bidir.go): decode holds a finished turn's prompt for the next turn,
	// prefill reads it back instead of computing it.
	Bidirectional bool
	// RecomputeThreshold (pull prefill, Bidirectional) is the least history,
	// in tokens, read back rather than recomputed (default
	// pullconn.DefaultKVRecomputeThreshold, vLLM's kv_recompute_threshold).
	RecomputeThreshold int
	// HistoryTTL (pull decode, Bidirectional) is how long a finished turn's
	// blocks wait for the next turn (default
	// pullconn.DefaultDecoderKVBlocksTTL, vLLM's decoder_kv_blocks_ttl).
	HistoryTTL time.Duration
	// ConnLogger is passed to the connectors (default: none, so that tests
	// do not get the periodic metrics line).
	ConnLogger *zap.Logger
	// TracerProvider records the engine's and its ranks' spans of the
	// requests (trace.go; docs/metrics.md). Default: otel's global
	// provider, which records nothing unless the program installed one.
	TracerProvider trace.TracerProvider
	// StatsInterval is the connectors' metrics line period
	// (connector.RankConfig.StatsInterval; default 10 s).
	StatsInterval time.Duration
	// KVLayout is the in-block order of the engine's KV cache (the
	// connectors' descriptors.Geometry.Order): "HND" (the default,
	// head-major) or "NHD" (token-major, vLLM's LBNHC; gonixl's protocol
	// only). Engines of different orders pair: the connectors permute.
	KVLayout string
	// TokensOnly is vLLM's `vllm serve --tokens-only`
	// (vllm/entrypoints/common/cli_args.py@0.34.0): the engine serves POST
	// /inference/v1/generate, token ids in and out (generate.go), and, having
	// no tokenizer, refuses text: chat requests and text prompts get vLLM's
	// 400, a token-id completion's text is "". Off, /inference/v1/generate
	// answers 403 as vLLM's does without --enable-scale-out.
	TokensOnly bool
	// Replies, when set, is the engine's reply script: token-id sequences,
	// one of which each request answers, chosen by the checksum of the KV
	// the engine computed or loaded (replies.go; docs/engine.md). A reply
	// that ends before max_tokens ends the request with finish_reason
	// "stop", as an EOS token would. Nil: the tokens come from the checksum
	// alone (docs/kvfill.md) and every request runs to max_tokens.
	Replies [][]int
	// VocabSize bounds the token ids requests and Replies may hold (default
	// Chat's tokenizer's, else VocabSize, 32000): a render server's
	// tokenizer has its own (cl100k's is over 100k).
	VocabSize int
	// Chat, when set, is the chat pipeline (examples/render/chat) that
	// /v1/chat/completions runs in process, as `vllm serve` without
	// --tokens-only does: its template and tokenizer make the prompt, its
	// detokenizer and reasoning and tool-call parsers the answer
	// (chatpipe.go). Nil: the engine's own word template (ChatPrompt).
	Chat *chat.Pipeline
}

// ModelSpec is a model's KV-cache geometry.
type ModelSpec struct {
	Name       string
	Layers     int
	KVHeads    int
	HeadDim    int
	DTypeBytes int
	DType      string
	BlockSize  int
	TPSize     int
	// Groups, when set, are the model's KV-cache groups (a sliding-window
	// model, a hybrid attention + Mamba model: descriptors.Geometry.Groups);
	// Layers is then their sum. The engine gives each group its own lists
	// (groups.go) and moves them with the connectors' grouped calls.
	Groups *[]descriptors.GroupGeometry
}

// ComputeModel is the modeled compute time: a prefill of n tokens takes
// PrefillBase + PrefillPerToken*n + PrefillPerToken2*n*n/1000; a decode step
// of a batch of b sequences holding c tokens of context in all takes
// DecodeBase + DecodePerSeq*b + DecodePerKToken*c/1000 (a decode step reads
// the weights once and every sequence's KV cache).
type ComputeModel struct {
	PrefillBase, PrefillPerToken time.Duration
	PrefillPerToken2             time.Duration // per token² / 1000
	DecodeBase, DecodePerSeq     time.Duration
	DecodePerKToken              time.Duration // per 1000 tokens of context in the batch
}

// Prefill returns the modeled time of a prefill of n tokens.
func (c ComputeModel) Prefill(n int) time.Duration {
	return c.PrefillBase + c.PrefillPerToken*time.Duration(n) + c.PrefillPerToken2*time.Duration(n)*time.Duration(n)/1000
}

// Decode returns the modeled time of a decode step of batch sequences that
// hold contextTokens tokens of context in all.
func (c ComputeModel) Decode(batch, contextTokens int) time.Duration {
	return c.DecodeBase + c.DecodePerSeq*time.Duration(batch) + c.DecodePerKToken*time.Duration(contextTokens)/1000
}

// Qwen3_32B_H200_TP8 is the compute model of Qwen3-32B in bf16 on one node
// of 8 H200 (TP 8), derived from public figures rather than fitted to any
// benchmark:
//   - Prefill: 2 x 32.8e9 FLOPs per token for the weights, plus causal
//     attention, 2 x 64 layers x 8192 (64 query heads x 128) FLOPs per token²
//     (Qwen3-32B's model card and config); at 50% of the H200's dense bf16
//     peak of 989 TFLOP/s (NVIDIA's H200 datasheet) on each of 8 GPUs: 16.6 µs
//     per token and 0.265 µs per 1000 tokens², plus 5 ms per step. A 1k
//     prompt takes 22 ms, a 16k prompt 348 ms.
//   - Decode: a step streams each GPU's 8.2 GB of weights (65.6 GB / 8) at
//     70% of the H200's 4.8 TB/s (2.4 ms), plus 128 TP all-reduces and the
//     step's launches and sampling (about 3.6 ms): 6 ms; each token of
//     context adds its 32 KiB of KV per GPU at the same rate, 9.75 µs per 1000
//     tokens of the batch.
var Qwen3_32B_H200_TP8 = ComputeModel{PrefillBase: 5 * time.Millisecond, PrefillPerToken: 16600 * time.Nanosecond,
	PrefillPerToken2: 265 * time.Nanosecond, DecodeBase: 6 * time.Millisecond, DecodePerKToken: 9750 * time.Nanosecond}

// Preset returns a named model and a compute model of the order of an H200
// node's: "qwen3-32b", "llama-3.1-70b" (TP 8) and "qwen2.5-7b" (TP 1);
// and two small grouped models of TP 2 for demos and tests (groups.go):
// "swa-demo" (full attention beside sliding-window layers) and
// "hybrid-demo" (full attention beside Mamba2 layers).
func Preset(name string) (ModelSpec, ComputeModel, bool) {
	switch name {
	case "qwen3-32b":
		return ModelSpec{Name: "Qwen/Qwen3-32B", Layers: 64, KVHeads: 8, HeadDim: 128, DTypeBytes: 2, DType: "bfloat16", BlockSize: 16, TPSize: 8},
			Qwen3_32B_H200_TP8, true
	case "llama-3.1-70b":
		return ModelSpec{Name: "meta-llama/Llama-3.1-70B-Instruct", Layers: 80, KVHeads: 8, HeadDim: 128, DTypeBytes: 2, DType: "bfloat16", BlockSize: 16, TPSize: 8},
			ComputeModel{PrefillBase: 20 * time.Millisecond, PrefillPerToken: 80 * time.Microsecond, PrefillPerToken2: 8 * time.Microsecond,
				DecodeBase: 10 * time.Millisecond, DecodePerSeq: 60 * time.Microsecond}, true
	case "swa-demo", "hybrid-demo":
		return demoGroups(name), demoGroupsCompute, true
	case "qwen2.5-7b":
		return ModelSpec{Name: "Qwen/Qwen2.5-7B-Instruct", Layers: 28, KVHeads: 4, HeadDim: 128, DTypeBytes: 2, DType: "bfloat16", BlockSize: 16, TPSize: 1},
			ComputeModel{PrefillBase: 8 * time.Millisecond, PrefillPerToken: 60 * time.Microsecond, PrefillPerToken2: 3 * time.Microsecond,
				DecodeBase: 6 * time.Millisecond, DecodePerSeq: 30 * time.Microsecond}, true
	}
	return ModelSpec{}, ComputeModel{}, false
}

// withDefaults fills zero fields and checks the rest.
func (c Config) withDefaults() (Config, error) {
	switch c.Role {
	case RolePrefill, RoleDecode:
	case "kv_producer":
		c.Role = RolePrefill
	case "kv_consumer":
		c.Role = RoleDecode
	default:
		return c, fmt.Errorf("engine: Config.Role is %q, want %q or %q", c.Role, RolePrefill, RoleDecode)
	}
	switch {
	case c.VocabSize == 0 && c.Chat != nil:
		c.VocabSize = c.Chat.Tokenizer().VocabSize()
	case c.VocabSize == 0:
		c.VocabSize = VocabSize
	case c.VocabSize < 0:
		return c, fmt.Errorf("engine: Config.VocabSize is %d, want > 0 (0: %d)", c.VocabSize, VocabSize)
	}
	if c.TokensOnly && c.Chat != nil {
		return c, fmt.Errorf("engine: Config.Chat is set on a TokensOnly engine, which loads no tokenizer; drop one (the render tier runs the pipeline for a tokens-only engine)")
	}
	if err := checkReplies(c.Replies, c.VocabSize); err != nil {
		return c, err
	}
	switch c.Connector {
	case ConnPull, ConnPush:
	case "":
		c.Connector = ConnPull
	default:
		return c, fmt.Errorf("engine: Config.Connector is %q, want %q or %q", c.Connector, ConnPull, ConnPush)
	}
	switch {
	case c.ProgressChunk < 0:
		return c, fmt.Errorf("engine: Config.ProgressChunk is %d, want >= 0 (0: no progress reports)", c.ProgressChunk)
	case c.ProgressChunk > 0 && c.Connector != ConnPush:
		return c, fmt.Errorf("engine: Config.ProgressChunk is %d with connector %q: progress reports need the push connector (pull READs only after prefill answered)", c.ProgressChunk, c.Connector)
	case c.ProgressLayers && c.Connector != ConnPush:
		return c, fmt.Errorf("engine: Config.ProgressLayers is set with connector %q: progress reports need the push connector (pull READs only after prefill answered)", c.Connector)
	}
	if c.Staging.Mode != connector.StagingOff && (c.Staging.Slots < 1 || c.Staging.SlotBytes == 0) {
		return c, fmt.Errorf("engine: Config.Staging.Mode is %q with %d slots of %d bytes: want at least one slot of at least one byte", c.Staging.Mode, c.Staging.Slots, c.Staging.SlotBytes)
	}
	switch c.Protocol {
	case ProtocolGonixl, ProtocolVLLM:
	case "":
		c.Protocol = ProtocolGonixl
	default:
		return c, fmt.Errorf("engine: Config.Protocol is %q, want %q or %q", c.Protocol, ProtocolGonixl, ProtocolVLLM)
	}
	if c.NewAgent == nil {
		return c, fmt.Errorf("engine: Config.NewAgent is required")
	}
	if c.Model == (ModelSpec{}) {
		c.Model, _, _ = Preset("qwen2.5-7b")
	}
	m := &c.Model
	if m.Name == "" {
		m.Name = "gonixl-sim"
	}
	if m.DTypeBytes == 0 {
		m.DTypeBytes = 2
	}
	if m.DType == "" {
		m.DType = map[int]string{1: "float8_e4m3fn", 2: "bfloat16", 4: "float32"}[m.DTypeBytes]
		if m.DType == "" {
			m.DType = fmt.Sprintf("bytes%d", m.DTypeBytes)
		}
	}
	if m.BlockSize == 0 {
		m.BlockSize = 16
	}
	if m.Layers <= 0 || m.KVHeads <= 0 || m.HeadDim <= 0 || m.DTypeBytes <= 0 || m.BlockSize <= 0 {
		return c, fmt.Errorf("engine: Config.Model %+v: Layers, KVHeads, HeadDim, DTypeBytes and BlockSize must be positive", *m)
	}
	if c.TPSize == 0 {
		c.TPSize = max(m.TPSize, 1)
	}
	if c.TPSize < 1 || (c.TPSize <= m.KVHeads && m.KVHeads%c.TPSize != 0) || (c.TPSize > m.KVHeads && c.TPSize%m.KVHeads != 0) {
		return c, fmt.Errorf("engine: Config.TPSize is %d, must divide the model's %d KV heads or be a multiple of them", c.TPSize, m.KVHeads)
	}
	if err := c.checkPP(); err != nil {
		return c, err
	}
	switch c.KVLayout {
	case "":
		c.KVLayout = descriptors.OrderHND
	case descriptors.OrderHND, descriptors.OrderNHD:
	default:
		return c, fmt.Errorf("engine: Config.KVLayout is %q, want %q or %q", c.KVLayout, descriptors.OrderHND, descriptors.OrderNHD)
	}
	if c.ServedModelName == "" {
		c.ServedModelName = m.Name
	}
	if c.EngineID == "" {
		c.EngineID = c.Role + "-" + randHex(8)
	}
	if c.NumBlocks == 0 {
		c.NumBlocks = DefaultNumBlocks
	}
	if c.NumBlocks < 1 {
		return c, fmt.Errorf("engine: Config.NumBlocks is %d, want > 0", c.NumBlocks)
	}
	if c.HTTPAddr == "" {
		c.HTTPAddr = "127.0.0.1:0"
	}
	if c.SideChannelHost == "" {
		c.SideChannelHost = "127.0.0.1"
		if c.Protocol == ProtocolVLLM {
			c.SideChannelHost = "localhost" // vLLM's VLLM_NIXL_SIDE_CHANNEL_HOST default
		}
	}
	if c.SideChannelPort < 0 || c.SideChannelPort > 65535 {
		return c, fmt.Errorf("engine: Config.SideChannelPort is %d, want 0..65535 (0: a free port)", c.SideChannelPort)
	}
	if c.DataParallelIndex < 0 || c.SideChannelPort != 0 && c.SideChannelPort+c.DataParallelIndex > 65535 {
		return c, fmt.Errorf("engine: Config.DataParallelIndex is %d: the side channel port %d + %d is not a port (want 0..%d)",
			c.DataParallelIndex, c.SideChannelPort, c.DataParallelIndex, 65535-c.SideChannelPort)
	}
	if c.MaxBatch <= 0 {
		c.MaxBatch = DefaultMaxBatch
	}
	if c.MaxWaiting <= 0 {
		c.MaxWaiting = DefaultMaxWaiting
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.PrefillTokenBudget <= 0 {
		c.PrefillTokenBudget = DefaultPrefillTokenBudget
	}
	switch c.FailurePolicy {
	case "":
		c.FailurePolicy = "fail"
	case "fail", "recompute":
	default:
		return c, fmt.Errorf("engine: Config.FailurePolicy is %q, want \"fail\" or \"recompute\"", c.FailurePolicy)
	}
	if c.Bidirectional && c.Connector != ConnPull {
		return c, fmt.Errorf("engine: Config.Bidirectional needs the pull connector, not %q (vLLM's push connector refuses bidirectional_kv_xfer too)", c.Connector)
	}
	if c.Bidirectional && c.Model.Groups != nil {
		// A sliding window's or a Mamba state's blocks are not a prefix
		// the next turn can start from.
		return c, fmt.Errorf("engine: Config.Bidirectional needs a model of one full-attention KV-cache group; %s has several", c.Model.Name)
	}
	if c.RecomputeThreshold < 0 || c.HistoryTTL < 0 {
		return c, fmt.Errorf("engine: Config.RecomputeThreshold is %d and Config.HistoryTTL %v, want >= 0", c.RecomputeThreshold, c.HistoryTTL)
	}
	if c.Clock == nil {
		c.Clock = connector.SystemClock{}
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return c, nil
}

// Protocols (Config.Protocol).
const (
	ProtocolGonixl = "gonixl"
	ProtocolVLLM   = "vllm"
)

// geometry returns the engine's KV-cache geometry: the model's, with the
// engine's block count, TP size and block order; K and V packed per layer
// in vLLM's protocol, as vLLM lays them out.
func (c *Config) geometry() descriptors.Geometry {
	m := c.Model
	order := c.KVLayout
	if order == descriptors.OrderHND {
		order = "" // the same order; the layouts encode as before Order existed
	}
	return descriptors.Geometry{Layers: m.Layers, KVHeads: m.KVHeads, HeadDim: m.HeadDim, DType: m.DType, ElemBytes: m.DTypeBytes,
		BlockSize: m.BlockSize, Blocks: c.NumBlocks, TPSize: c.TPSize, PPSize: c.PPSize, KVPacked: c.Protocol == ProtocolVLLM, Groups: m.Groups,
		Order: order}
}

// engineConfig returns the connector engine's configuration.
func (c *Config) engineConfig() connector.EngineConfig {
	ec := connector.EngineConfig{EngineID: c.EngineID, ListenAddr: net.JoinHostPort(c.SideChannelHost, strconv.Itoa(c.sideChannelPort())),
		Model: c.Model.Name, Geometry: c.geometry(), Clock: c.Clock, Logger: c.ConnLogger}
	if c.Protocol == ProtocolVLLM {
		ec.Protocol = connector.ProtocolVLLM
		ec.Model = cmp.Or(c.VLLMModel, c.Model.Name)
		ec.VLLM = connector.VLLM{Version: c.VLLMVersion, AttentionBackend: c.AttentionBackend, ConnectorVersion: c.VLLMConnectorVersion}
	}
	return ec
}

// sideChannelPort is the port the side channel listens on: SideChannelPort
// plus the data-parallel index, as vLLM computes it (0 stays 0: any port).
func (c *Config) sideChannelPort() int {
	if c.SideChannelPort == 0 {
		return 0
	}
	return c.SideChannelPort + c.DataParallelIndex
}
