package server

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"strconv"

	"github.com/gonixl/gonixl/examples/discovery"
)

// Record returns what the engine publishes in the etcd registry (package
// discovery): its addresses, role, connector, parallel sizes, model, the
// compatibility hash and this start's incarnation.
func (s *Server) Record() discovery.Record {
	return discovery.Record{EngineID: s.info.EngineID, Role: s.info.Role, HTTPAddr: s.ln.Addr().String(),
		SideChannelAddr: net.JoinHostPort(s.info.SideChannelHost, strconv.Itoa(s.info.SideChannelPort)),
		Connector:       s.info.Connector, TPSize: s.info.TPSize, PPSize: s.info.PPSize, Model: s.info.Model,
		CompatHash: s.CompatHash(), Incarnation: s.incarn}
}

// CompatHash digests what a prefill and a decode engine must agree on for
// KV blocks to move between them: the connector, the model's KV geometry
// (layers, KV heads, head size, dtype) and the block size. TP sizes may
// differ (the connectors map ranks) and are not in it.
func (s *Server) CompatHash() string {
	m := s.cfg.Model
	h := sha256.Sum256(fmt.Appendf(nil, "gonixl-kv/1 connector=%s model=%s layers=%d kv_heads=%d head_dim=%d dtype=%s dtype_bytes=%d block_size=%d",
		s.cfg.Connector, m.Name, m.Layers, m.KVHeads, m.HeadDim, m.DType, m.DTypeBytes, m.BlockSize))
	return hex.EncodeToString(h[:8])
}
