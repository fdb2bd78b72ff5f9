package handshake

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// Version is the handshake protocol version; engines of different versions
// refuse each other.
const Version = 1

// Transfer modes: who initiates the transfer.
const (
	ModePull = "pull" // decode READs prefill's blocks
	ModePush = "push" // prefill WRITEs into decode's blocks
)

// ErrIncompatible is matched by every error that refuses a pair of engines.
var ErrIncompatible = errors.New("incompatible engines")

// Compat are the facts two engines must agree on to exchange KV blocks.
// TP sizes and block sizes may differ and are not part of it.
type Compat struct {
	Version int    `msgpack:"version"`
	Model   string `msgpack:"model"`  // model name or path
	DType   string `msgpack:"dtype"`  // KV-cache element type
	Layout  string `msgpack:"layout"` // KV-cache layout name (LayoutName), e.g. "HND" or "NHD+groups=full,ssm"
	Mode    string `msgpack:"mode"`   // ModePull or ModePush
}

// Hash returns the compatibility hash: hex of the first 16 bytes of the
// SHA-256 of the msgpack encoding of c.
func (c Compat) Hash() string {
	b, err := msgpack.Marshal(c)
	if err != nil {
		// A struct of strings and an int always encodes.
		panic(fmt.Sprintf("encode compat: %v", err))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// Validate reports an unusable field of the local engine's facts.
func (c Compat) Validate() error {
	switch {
	case c.Version != Version:
		return fmt.Errorf("compat version is %d, this build speaks %d", c.Version, Version)
	case c.Model == "":
		return errors.New("compat model is empty")
	case c.DType == "":
		return errors.New("compat dtype is empty")
	case c.Layout == "":
		return errors.New("compat layout is empty")
	case c.Mode != ModePull && c.Mode != ModePush:
		return fmt.Errorf("compat mode is %q, want %q or %q", c.Mode, ModePull, ModePush)
	}
	return nil
}

// Check refuses a remote engine that local cannot exchange blocks with. The
// error matches ErrIncompatible and names the first differing fact with both
// values, e.g. `transfer mode mismatch: local "pull", remote "push"`.
// Layout names agree when they are equal or differ only in their block
// order, HND against NHD (see LayoutName): the descriptors permute between
// the two. remoteHash is the hash the remote computed of its facts; one
// that differs from this build's hash of them (another hashing rule) is
// refused too. Where every fact is equal that is the old rule, local's
// hash against remoteHash, which a gonixl peer that predates the order
// still applies: to it an NHD name is another layout.
func Check(local, remote Compat, remoteHash string) error {
	if local.Version != remote.Version {
		return fmt.Errorf("%w: protocol version mismatch: local %d, remote %d", ErrIncompatible, local.Version, remote.Version)
	}
	for _, f := range []struct{ what, l, r string }{
		{"transfer mode", local.Mode, remote.Mode},
		{"model", local.Model, remote.Model},
		{"kv dtype", local.DType, remote.DType},
	} {
		if f.l != f.r {
			return fmt.Errorf("%w: %s mismatch: local %q, remote %q", ErrIncompatible, f.what, f.l, f.r)
		}
	}
	if !sameLayout(local.Layout, remote.Layout) {
		return fmt.Errorf("%w: kv layout mismatch: local %q, remote %q", ErrIncompatible, local.Layout, remote.Layout)
	}
	if h := remote.Hash(); h != remoteHash {
		return fmt.Errorf("%w: compatibility hash mismatch: local %q, remote %q", ErrIncompatible, h, remoteHash)
	}
	return nil
}
