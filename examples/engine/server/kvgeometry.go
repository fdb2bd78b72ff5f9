package server

import "github.com/gonixl/gonixl/descriptors"

// KVGeometry is the part of an engine's KV-cache geometry that decides
// whether it can exchange KV with another engine (descriptors.Compatible):
// GET /kv_transfer_info reports it so that a proxy can refuse a pair that
// differs before it sends a request to either. Block size, TP and PP size,
// block count and the in-block order are not in it: the connectors map them.
type KVGeometry struct {
	Layers     int    `json:"layers"`
	KVHeads    int    `json:"kv_heads"` // the model's, over all TP ranks
	HeadDim    int    `json:"head_dim"`
	DType      string `json:"dtype"`
	DTypeBytes int    `json:"dtype_bytes"`
	MLA        bool   `json:"mla"`
	KVPacked   bool   `json:"kv_packed"` // K and V of a layer in one region (vLLM's protocol)
	// Groups are the model's KV-cache groups, none for a model of one.
	Groups []KVGroup `json:"groups,omitempty"`
}

// KVGroup is one KV-cache group of a KVGeometry.
type KVGroup struct {
	Kind   string `json:"kind"`
	Layers int    `json:"layers"`
	Window int    `json:"window,omitempty"` // sliding window, tokens
	Conv   []int  `json:"conv,omitempty"`   // SSM: model bytes of each conv part of a slot
	State  int    `json:"state,omitempty"`  // SSM: model bytes of the temporal state
}

// kvGeometryOf returns what /kv_transfer_info reports of g.
func kvGeometryOf(g descriptors.Geometry) *KVGeometry {
	eb := g.ElemBytes
	if eb == 0 {
		eb, _ = descriptors.DTypeBytes(g.DType)
	}
	out := &KVGeometry{Layers: g.Layers, KVHeads: g.KVHeads, HeadDim: g.HeadDim, DType: g.DType, DTypeBytes: eb,
		MLA: g.MLA, KVPacked: g.KVPacked}
	if g.Groups != nil {
		for _, gg := range *g.Groups {
			out.Groups = append(out.Groups, KVGroup{Kind: string(gg.Kind), Layers: gg.Layers, Window: gg.Window,
				Conv: append([]int(nil), gg.Conv...), State: gg.State})
		}
	}
	return out
}
