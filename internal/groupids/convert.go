package groupids

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
)

// RoundTrip returns the flat ids and group lists that Params reading what
// OnWire(flat, groups) wrote would hold (Decode), without the JSON, as
// copies: one list as flat ids, several as groups (a nil group empty),
// none as nil.
func RoundTrip(flat []int, groups [][]int) ([]int, [][]int) {
	w := OnWire(flat, groups)
	switch {
	case w == nil:
		return nil, nil
	case len(w) == 0:
		return []int{}, nil
	case len(w) == 1:
		if w[0] == nil {
			return []int{}, nil
		}
		return slices.Clone(w[0]), nil
	}
	out := make([][]int, len(w))
	for i, g := range w {
		if g == nil {
			g = []int{}
		}
		out[i] = slices.Clone(g)
	}
	return nil, out
}

// Convert copies kv_transfer_params from one view to the other (a
// connector's Params, connector.Params: structs with the block-list fields
// RemoteBlockIDs []int and RemoteGroupBlockIDs [][]int, embedded or not):
// every key through their JSON, as both read and write vLLM's object,
// except the block lists, which are copied as their JSON would carry them
// (RoundTrip). The lists are most of the object: a JSON round trip of a
// 1,024-block request's took 0.4 ms on the engine's goroutine
// (BenchmarkConvertParams in pullconn, a busy 2-core machine), this 0.03–0.06 ms.
func Convert[F, T any](from F, to *T) error {
	ff, fg, err := blockLists(&from)
	if err != nil {
		return err
	}
	tf, tg, err := blockLists(to)
	if err != nil {
		return err
	}
	flat, groups := *ff, *fg
	*ff, *fg = nil, nil // from is the caller's copy
	b, err := json.Marshal(from)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, to); err != nil {
		return err
	}
	*tf, *tg = RoundTrip(flat, groups)
	return nil
}

// blockLists points at the block-list fields of the struct v points to.
func blockLists(v any) (*[]int, *[][]int, error) {
	s := reflect.ValueOf(v).Elem()
	if s.Kind() == reflect.Struct {
		f, g := s.FieldByName("RemoteBlockIDs"), s.FieldByName("RemoteGroupBlockIDs")
		if f.IsValid() && g.IsValid() {
			if fp, ok := f.Addr().Interface().(*[]int); ok {
				if gp, ok := g.Addr().Interface().(*[][]int); ok {
					return fp, gp, nil
				}
			}
		}
	}
	return nil, nil, fmt.Errorf("groupids: a %T has no block-list fields", v)
}
