package engine

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestConfigOf(t *testing.T) {
	type shared struct{ N int }
	type own struct {
		shared
		Extra bool
	}
	wrap := func(s shared) own { return own{shared: s} }
	for _, tc := range []struct {
		in   any
		want own
		ok   bool
	}{
		{own{shared{1}, true}, own{shared{1}, true}, true},
		{&own{shared{2}, true}, own{shared{2}, true}, true},
		{shared{3}, own{shared: shared{3}}, true},
		{&shared{4}, own{shared: shared{4}}, true},
		{(*own)(nil), own{}, false},
		{(*shared)(nil), own{}, false},
		{nil, own{}, false},
		{"a string", own{}, false},
	} {
		got, ok := ConfigOf[own, shared](tc.in, wrap)
		require.Equal(t, tc.ok, ok, "%T", tc.in)
		require.Equal(t, tc.want, got, "%T", tc.in)
	}
}
