package vllm

import (
	"fmt"
	"strings"
)

// Version is a NIXL_CONNECTOR_VERSION: it picks the fields of
// NixlAgentMetadata and their wire order, the nixl_connector_version of the
// compatibility hash (so a peer of another version is refused by the hash
// check before its metadata is read), the speculative factors hashed, the
// kv_transfer_params keys, and how a peer's regions pair with the local
// ones. What each version changed, from the version history in
// vllm/distributed/kv_transfer/kv_connector/v1/nixl/metadata.py @ vllm
// 0.34.0:
//
//	12  region_members (layers sharing each region; PP push only)
//	13  packed_member_layouts; packed-push backend hashes order-independent
//	14  ple_block_len (page length of a PLE short-conv state)
//	15  remote_registration_generation in kv_transfer_params
//	16  regions pair by layer name: every peer advertises region_members,
//	    and layer_group_ids (each layer's KV-cache group); the speculative
//	    factor of the hash drops parallel_drafting
type Version int

// The versions this package speaks.
const (
	V12 Version = 12
	V13 Version = 13
	V14 Version = 14
	V15 Version = 15
	V16 Version = 16
	// OldestVersion and NewestVersion bound the versions spoken.
	OldestVersion = V12
	NewestVersion = V16
)

// DefaultVersion is the version of the newest vLLM release (0.34.0).
const DefaultVersion = NewestVersion

// releaseVersions are the vLLM releases and the NIXL_CONNECTOR_VERSION
// each speaks, read in each wheel's nixl/metadata.py (0.30.0 speaks 11, and
// no release speaks 12: it was a development version between 0.30.0 and
// 0.31.0).
var releaseVersions = []struct {
	release string
	version Version
}{
	{"0.31.0", V13},
	{"0.32.0", V14},
	{"0.33.0", V15},
	{"0.34.0", V16},
}

// VersionOfRelease returns the version a vLLM release speaks, by its
// vllm.__version__: a listed release ("0.33.0"), with or without a local
// build suffix ("0.33.0+cu129"); false for any other (a patch release not
// listed, a release candidate, a development build "….devN+g<sha>"),
// whose version only its own nixl/metadata.py tells.
func VersionOfRelease(release string) (Version, bool) {
	if i := strings.IndexByte(release, '+'); i >= 0 {
		release = release[:i]
	}
	for _, r := range releaseVersions {
		if release == r.release {
			return r.version, true
		}
	}
	return 0, false
}

// Check reports a version this package does not speak.
func (v Version) Check() error {
	if v < OldestVersion || v > NewestVersion {
		return fmt.Errorf("%w: NIXL connector version %d: gonixl speaks %d to %d", ErrUnsupported, int(v), int(OldestVersion), int(NewestVersion))
	}
	return nil
}

// hasKey reports whether NixlAgentMetadata has key k at v.
func (v Version) hasKey(k int) bool { return v >= keySince[k] }

// PairsByLayer reports whether a peer's regions pair with the local ones
// by the layer names of region_members (16 on) rather than by position.
func (v Version) PairsByLayer() bool { return v >= V16 }

// PublishesMembers reports whether a rank publishes region_members (13 on:
// vLLM's workers fill it whatever their parallel layout from 13; at 12
// only its push worker did, for PP).
func (v Version) PublishesMembers() bool { return v >= V13 }

// HasRegistrationGeneration reports whether kv_transfer_params carry
// remote_registration_generation (15 on).
func (v Version) HasRegistrationGeneration() bool { return v >= V15 }
