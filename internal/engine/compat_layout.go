package engine

import (
	"github.com/gonixl/gonixl/internal/handshake"
)

// compatLayout is the layout name the engine's handshake compares
// (handshake.Compat.Layout, see handshake.LayoutName): the block order of
// the engine's geometry ("HND", as every gonixl engine before the order
// was named sent; KVLayout is always "HND", the family withDefaults
// accepts), with the group kinds appended for a grouped geometry
// ("HND+groups=full,ssm"). An older gonixl peer skips a layout's unknown
// "order" and "groups" keys and would read an NHD rank's blocks as HND or
// the regions as one full-attention group; the differing name makes it
// refuse the pair in the handshake ("kv layout mismatch") instead.
func compatLayout(cfg Config) string {
	var kinds []string
	if gs := cfg.Geometry.Groups; gs != nil {
		for _, g := range *gs {
			kinds = append(kinds, string(g.Kind))
		}
	}
	return handshake.LayoutName(cfg.Geometry.Order, kinds)
}
