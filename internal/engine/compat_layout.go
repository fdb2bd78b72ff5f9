package engine

import (
	"strings"
)

// compatLayout is the layout name the engine's handshake compares
// (handshake.Compat.Layout): KVLayout ("HND") for one group of attention,
// as every gonixl engine before KV-cache groups sent, and with the group
// kinds appended for a grouped geometry ("HND+groups=full,ssm"). An older
// gonixl peer skips a layout's unknown "groups" key and would read the
// regions as one full-attention group; the differing name makes it refuse
// the pair in the handshake ("kv layout mismatch") instead.
func compatLayout(cfg Config) string {
	gs := cfg.Geometry.Groups
	if gs == nil || len(*gs) == 0 {
		return cfg.KVLayout
	}
	kinds := make([]string, len(*gs))
	for i, g := range *gs {
		kinds[i] = string(g.Kind)
	}
	return cfg.KVLayout + "+groups=" + strings.Join(kinds, ",")
}
