package descriptors

import (
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// decodeGroups decodes a layout's groups within the bounds Validate
// enforces, before anything is allocated for them: at most MaxGroups
// groups, MaxRegions region indexes per group, MaxConvParts conv parts; as
// for regions, slices grow only with elements actually decoded, so what
// decoding allocates stays proportional to the bytes sent.
func decodeGroups(dec *msgpack.Decoder) ([]Group, error) {
	n, err := dec.DecodeArrayLen()
	if err != nil {
		return nil, fmt.Errorf("descriptors: layout groups: %w", err)
	}
	if n > MaxGroups {
		return nil, fmt.Errorf("descriptors: layout lists %d groups, limit %d", n, MaxGroups)
	}
	if n <= 0 {
		return nil, nil
	}
	groups := make([]Group, 0, min(n, 8))
	for i := range n {
		g, err := decodeGroup(dec, i)
		if err != nil {
			return nil, err
		}
		groups = append(groups, g)
	}
	return groups, nil
}

func decodeGroup(dec *msgpack.Decoder, i int) (Group, error) {
	var g Group
	m, err := dec.DecodeMapLen()
	if err != nil {
		return g, fmt.Errorf("descriptors: layout groups[%d]: %w", i, err)
	}
	if m < 0 {
		return g, fmt.Errorf("descriptors: layout groups[%d] is nil", i)
	}
	for range m {
		key, err := dec.DecodeString()
		if err != nil {
			return g, fmt.Errorf("descriptors: layout groups[%d] key: %w", i, err)
		}
		switch key {
		case "kind":
			var k string
			k, err = dec.DecodeString()
			g.Kind = GroupKind(k)
		case "regions":
			g.Regions, err = decodeInts(dec, MaxRegions)
		case "block_size":
			g.BlockSize, err = dec.DecodeInt()
		case "physical_per_logical":
			g.PhysicalPerLogical, err = dec.DecodeInt()
		case "window":
			g.Window, err = dec.DecodeInt()
		case "kv_heads":
			g.KVHeads, err = dec.DecodeInt()
		case "head_bytes":
			g.HeadBytes, err = dec.DecodeInt()
		case "ssm":
			g.SSM, err = decodeSSM(dec)
		default:
			err = dec.Skip()
		}
		if err != nil {
			return g, fmt.Errorf("descriptors: layout groups[%d].%s: %w", i, key, err)
		}
	}
	return g, nil
}

// decodeSSM decodes an SSM group's state geometry, or nil.
func decodeSSM(dec *msgpack.Decoder) (*SSMState, error) {
	m, err := dec.DecodeMapLen()
	if err != nil {
		return nil, err
	}
	if m < 0 {
		return nil, nil
	}
	s := &SSMState{}
	for range m {
		key, err := dec.DecodeString()
		if err != nil {
			return nil, fmt.Errorf("key: %w", err)
		}
		switch key {
		case "conv":
			s.Conv, err = decodeInts(dec, MaxConvParts)
		case "state":
			s.State, err = dec.DecodeInt()
		case "page":
			s.Page, err = dec.DecodeInt()
		default:
			err = dec.Skip()
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
	}
	return s, nil
}

// decodeInts decodes an array of at most limit ints (nil for a nil or
// empty array).
func decodeInts(dec *msgpack.Decoder, limit int) ([]int, error) {
	n, err := dec.DecodeArrayLen()
	if err != nil {
		return nil, err
	}
	if n > limit {
		return nil, fmt.Errorf("%d elements, limit %d", n, limit)
	}
	if n <= 0 {
		return nil, nil
	}
	out := make([]int, 0, min(n, 64))
	for range n {
		v, err := dec.DecodeInt()
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}
