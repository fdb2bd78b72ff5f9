package handshake

import (
	"strings"

	"github.com/gonixl/gonixl/descriptors"
)

// The compatibility layout name (Compat.Layout) is a head and optional
// "+key=value" parts: "HND", "HND+groups=full,ssm", "NHD",
// "NHD+groups=full,sliding_window".
//
// The head is the engine's in-block order: "HND" (head-major, what every
// gonixl engine sent before the order was part of the name) or "NHD"
// (token-major). A gonixl peer that predates descriptors.Layout.Order
// compares names byte for byte and would read an NHD rank's layout as
// HND, so an NHD name makes it refuse the pair ("kv layout mismatch")
// instead of moving misplaced bytes; an HND engine's name is what it
// always was, so HND engines and those older peers still pair. Two current
// peers accept each other's order: the descriptors permute between HND
// and NHD blocks (descriptors.MapRequest), so only the rest of the name
// must agree.
//
// The groups part lists the KV-cache group kinds (see LayoutName): an
// older peer skips a layout's unknown "groups" key, so a differing name
// makes it refuse a grouped engine; current peers compare it as it is
// (differing group lists cannot exchange blocks).

// LayoutName returns the compatibility layout name of an engine whose
// blocks are in order (descriptors.Layout.Order; "" is HND) and whose
// KV-cache groups are of kinds (nil or empty: one group of attention).
func LayoutName(order string, kinds []string) string {
	name := descriptors.OrderOf(order)
	if len(kinds) > 0 {
		name += "+groups=" + strings.Join(kinds, ",")
	}
	return name
}

// sameLayout reports whether two current peers with layout names l and r
// can exchange blocks: equal names, or names that differ only in their
// order head (HND against NHD).
func sameLayout(l, r string) bool {
	if l == r {
		return true
	}
	lh, lt := splitHead(l)
	rh, rt := splitHead(r)
	return orderHead(lh) && orderHead(rh) && lt == rt
}

// splitHead cuts a layout name into its head and the rest ("+..." or "").
func splitHead(name string) (head, tail string) {
	if i := strings.IndexByte(name, '+'); i >= 0 {
		return name[:i], name[i:]
	}
	return name, ""
}

// orderHead reports whether a name's head is a block order.
func orderHead(head string) bool {
	return head == descriptors.OrderHND || head == descriptors.OrderNHD
}
