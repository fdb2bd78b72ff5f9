// Package groupids holds what both connectors do with block ids given per
// KV-cache group: checking them against a layout, copying them, and
// reading vLLM's remote_block_ids, which is a list of lists (one per
// group) where gonixl's single-group Params write a flat list.
package groupids

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gonixl/gonixl/descriptors"
)

// Copy returns a deep copy of lists: the connectors use the ids after the
// call that gave them returned, when the engine may reuse its slices. A
// nil list stays nil, an empty one empty.
func Copy(lists [][]int) [][]int {
	if lists == nil {
		return nil
	}
	out := make([][]int, len(lists))
	for i, l := range lists {
		out[i] = append([]int{}, l...)
	}
	return out
}

// Empty reports whether no list names a block: nothing of the request
// moves (a full prefix hit on every group).
func Empty(lists [][]int) bool {
	for _, l := range lists {
		if len(l) > 0 {
			return false
		}
	}
	return true
}

// Check reports the first list or id that cannot name blocks of l: one
// list per group of l (Layout.GroupList), each id a logical block of its
// group (below NumBlocks / PhysicalPerLogical). field names the argument
// in the error (say "blockIDs" or "Params.RemoteBlockIDs").
func Check(l *descriptors.Layout, field string, lists [][]int) error {
	groups := l.GroupList()
	if len(lists) != len(groups) {
		return fmt.Errorf("%s has %d KV-cache group lists, the layout has %d groups", field, len(lists), len(groups))
	}
	for g, ids := range lists {
		n := l.NumBlocks / max(groups[g].PhysicalPerLogical, 1)
		for i, b := range ids {
			if b < 0 || b >= n {
				return fmt.Errorf("%s[%d][%d] is %d, group %d (%s) has %d logical blocks", field, g, i, b, g, groups[g].Kind, n)
			}
		}
	}
	return nil
}

// Flatten returns every id of lists in order, for digests and logs.
func Flatten(lists [][]int) []int {
	var out []int
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

// Decode reads a remote_block_ids value: a list of several lists (vLLM's
// Params of a hybrid model, gonixl's grouped Params) goes to groups; a
// list of one list (vLLM's and gonixl's Params of a single-group model)
// and a flat list (gonixl's Params before they wrote vLLM's form) go to
// flat, so that single-group Params read back as they were written. null
// or an absent value gives neither.
func Decode(raw json.RawMessage) (flat []int, groups [][]int, err error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil, nil
	}
	if len(raw) > 1 && raw[0] == '[' {
		if inner := bytes.TrimSpace(raw[1:]); len(inner) > 0 && inner[0] == '[' {
			if err := json.Unmarshal(raw, &groups); err != nil {
				return nil, nil, fmt.Errorf("remote_block_ids: %v", err)
			}
			for g := range groups {
				if groups[g] == nil {
					groups[g] = []int{}
				}
			}
			if len(groups) == 1 {
				return groups[0], nil, nil
			}
			return nil, groups, nil
		}
	}
	if err := json.Unmarshal(raw, &flat); err != nil {
		return nil, nil, fmt.Errorf("remote_block_ids: %v", err)
	}
	return flat, nil, nil
}

// OnWire returns the remote_block_ids a connector's Params write, as vLLM
// writes them: one list per KV-cache group, so a single-group request's
// flat ids as a list of one list; nil when neither is set.
func OnWire(flat []int, groups [][]int) [][]int {
	if groups == nil && flat != nil {
		return [][]int{flat}
	}
	for g := range groups {
		if groups[g] == nil {
			// A group without blocks is written [], not null: a reader
			// takes [null] for one group of block id 0.
			out := slices.Clone(groups)
			for i := range out {
				if out[i] == nil {
					out[i] = []int{}
				}
			}
			return out
		}
	}
	return groups
}

// FromWire reads what a connector's Params received under
// remote_block_ids (raw, see Decode) and remote_num_tokens (remoteTokens,
// nil when absent) into its flat ids, group lists and token count; the
// count is taken from remote_num_tokens only when num_tokens gave none.
func FromWire(raw json.RawMessage, remoteTokens *int, flat *[]int, groups *[][]int, numTokens *int) error {
	f, g, err := Decode(raw)
	if err != nil {
		return err
	}
	*flat, *groups = f, g
	if *numTokens == 0 && remoteTokens != nil {
		*numTokens = *remoteTokens
	}
	return nil
}

// KeyPath rewrites a type error of decoding Params so that its Field is
// the path of JSON keys the peer sent ("remote_port"), without the Go
// names encoding/json adds for the embedded structs Params decode through
// ("paramsJSON.TransferParams."): Params' keys are snake_case, so a
// component with an upper-case letter is one of those. Other errors pass
// unchanged.
func KeyPath(err error) error {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) {
		return err
	}
	var keep []string
	for _, c := range strings.Split(te.Field, ".") {
		if c != "" && strings.ToLower(c) == c {
			keep = append(keep, c)
		}
	}
	out := *te
	out.Field, out.Struct = strings.Join(keep, "."), "Params"
	return &out
}
