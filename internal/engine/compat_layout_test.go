package engine

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/internal/handshake"
)

// An older peer compares the layout name it sends ("HND") with a grouped
// engine's, and refuses the pair with both names.
func TestCompatLayoutGroups(t *testing.T) {
	plain := Config{KVLayout: "HND"}
	require.Equal(t, "HND", compatLayout(plain))
	grouped := Config{KVLayout: "HND", Geometry: descriptors.Geometry{Groups: &[]descriptors.GroupGeometry{
		{Kind: descriptors.KindFull, Layers: 1}, {Kind: descriptors.KindSSM, Layers: 2}}}}
	require.Equal(t, "HND+groups=full,ssm", compatLayout(grouped))
	old := handshake.Compat{Version: handshake.Version, Model: "m", DType: "bfloat16", Layout: "HND", Mode: handshake.ModePull}
	cur := old
	cur.Layout = compatLayout(grouped)
	err := handshake.Check(old, cur, cur.Hash())
	require.ErrorIs(t, err, handshake.ErrIncompatible)
	require.ErrorContains(t, err, `kv layout mismatch: local "HND", remote "HND+groups=full,ssm"`)
}

// The geometry's block order heads the name; an HND geometry's name is
// what it was before the order was named.
func TestCompatLayoutOrder(t *testing.T) {
	hnd := Config{KVLayout: "HND", Geometry: descriptors.Geometry{Order: descriptors.OrderHND}}
	require.Equal(t, "HND", compatLayout(hnd))
	nhd := Config{KVLayout: "HND", Geometry: descriptors.Geometry{Order: descriptors.OrderNHD}}
	require.Equal(t, "NHD", compatLayout(nhd))
	nhd.Geometry.Groups = &[]descriptors.GroupGeometry{{Kind: descriptors.KindFull, Layers: 1}, {Kind: descriptors.KindSlidingWindow, Layers: 1}}
	require.Equal(t, "NHD+groups=full,sliding_window", compatLayout(nhd))
}
