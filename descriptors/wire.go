package descriptors

import (
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// MaxRegions bounds the regions a decoded Layout may list: two per layer at
// MaxLayers.
const MaxRegions = 2 * MaxLayers

// DecodeMsgpack decodes a Layout from a peer's handshake. It exists so that
// the bytes a peer sends bound what decoding costs: the generic decoder
// would allocate a Region for every element an array header claims, and a
// nil element takes one byte of input against 16 bytes of Region. Here the
// region count is checked against MaxRegions before anything is allocated,
// and every region must be a map with both of its keys, so each one costs
// the sender more bytes than it costs the receiver. Unknown keys are
// skipped, as the generic decoder does.
func (l *Layout) DecodeMsgpack(dec *msgpack.Decoder) error {
	n, err := dec.DecodeMapLen()
	if err != nil {
		return err
	}
	if n < 0 {
		return fmt.Errorf("descriptors: layout is nil")
	}
	var out Layout
	for range n {
		key, err := dec.DecodeString()
		if err != nil {
			return fmt.Errorf("descriptors: layout key: %w", err)
		}
		var field any
		switch key {
		case "mem":
			field = &out.Mem
		case "regions":
			if out.Regions, err = decodeRegions(dec); err != nil {
				return err
			}
			continue
		case "num_layers":
			field = &out.NumLayers
		case "num_blocks":
			field = &out.NumBlocks
		case "block_size":
			field = &out.BlockSize
		case "kv_heads":
			field = &out.KVHeads
		case "model_kv_heads":
			field = &out.ModelKVHeads
		case "head_bytes":
			field = &out.HeadBytes
		case "dtype":
			field = &out.DType
		case "mla":
			field = &out.MLA
		case "kv_packed":
			field = &out.KVPacked
		case "tp_rank":
			field = &out.TPRank
		case "tp_size":
			field = &out.TPSize
		case "order":
			field = &out.Order
		case "pp_rank":
			field = &out.PPRank
		case "pp_size":
			field = &out.PPSize
		case "first_layer":
			field = &out.FirstLayer
		case "model_layers":
			field = &out.ModelLayers
		case "groups":
			if out.Groups, err = decodeGroups(dec); err != nil {
				return err
			}
			continue
		default:
			if err := dec.Skip(); err != nil {
				return fmt.Errorf("descriptors: layout key %q: %w", key, err)
			}
			continue
		}
		if err := dec.Decode(field); err != nil {
			return fmt.Errorf("descriptors: layout %s: %w", key, err)
		}
	}
	*l = out
	return nil
}

func decodeRegions(dec *msgpack.Decoder) ([]Region, error) {
	n, err := dec.DecodeArrayLen()
	if err != nil {
		return nil, fmt.Errorf("descriptors: layout regions: %w", err)
	}
	if n > MaxRegions {
		return nil, fmt.Errorf("descriptors: layout lists %d regions, limit %d", n, MaxRegions)
	}
	if n <= 0 {
		return nil, nil
	}
	// The count is bounded above; the slice still grows only with regions
	// actually decoded, so a short body cannot claim the whole bound.
	regions := make([]Region, 0, min(n, 64))
	for i := range n {
		var r Region
		var seen int
		m, err := dec.DecodeMapLen()
		if err != nil {
			return nil, fmt.Errorf("descriptors: layout regions[%d]: %w", i, err)
		}
		for range max(m, 0) {
			key, err := dec.DecodeString()
			if err != nil {
				return nil, fmt.Errorf("descriptors: layout regions[%d] key: %w", i, err)
			}
			switch key {
			case "base":
				r.Base, err = dec.DecodeUint64()
				seen |= 1
			case "dev_id":
				r.DevID, err = dec.DecodeUint64()
				seen |= 2
			default:
				err = dec.Skip()
			}
			if err != nil {
				return nil, fmt.Errorf("descriptors: layout regions[%d].%s: %w", i, key, err)
			}
		}
		if seen != 3 {
			return nil, fmt.Errorf("descriptors: layout regions[%d] lacks base or dev_id", i)
		}
		regions = append(regions, r)
	}
	return regions, nil
}
