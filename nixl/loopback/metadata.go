package loopback

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/gonixl/gonixl/nixl"
)

// mdMagic opens every metadata blob, so that bytes from elsewhere (a native
// NIXL agent's metadata, a truncated read) are refused rather than guessed at.
const mdMagic = "gonixl-loopback/1"

// maxMetadataLen bounds a blob LoadRemoteMD will decode.
const maxMetadataLen = 64 << 20

// metadata is what an agent tells its peers: who it is, how to reach it, and
// which memory they may address. It is the loopback counterpart of the
// serialized nixlAgent metadata.
type metadata struct {
	Magic  string `msgpack:"m"`
	Agent  string `msgpack:"a"`
	Fabric uint64 `msgpack:"f"`
	// Conn identifies the agent instance; 0 means the blob carries no
	// connection information (partial metadata without IncludeConnInfo).
	Conn    uint64    `msgpack:"c"`
	Regions mdRegions `msgpack:"r"`
}

// maxRegions bounds the regions of one blob.
const maxRegions = 1 << 20

// mdRegions decodes itself because msgpack v5.4.1 allocates a slice of
// structs as long as the array header claims, before reading any element:
// five bytes could then ask for gigabytes.
type mdRegions []mdRegion

// DecodeMsgpack reads the list one element at a time.
func (l *mdRegions) DecodeMsgpack(dec *msgpack.Decoder) error {
	n, err := dec.DecodeArrayLen()
	if err != nil {
		return err
	}
	if n > maxRegions {
		return fmt.Errorf("%d regions is over the limit of %d", n, maxRegions)
	}
	if n <= 0 {
		*l = nil
		return nil
	}
	out := make(mdRegions, 0, min(n, 64))
	for i := 0; i < n; i++ {
		var r mdRegion
		if err := dec.Decode(&r); err != nil {
			return fmt.Errorf("region %d: %w", i, err)
		}
		out = append(out, r)
	}
	*l = out
	return nil
}

type mdRegion struct {
	Mem  nixl.MemType `msgpack:"t"`
	Addr uint64       `msgpack:"a"`
	Len  uint64       `msgpack:"l"`
	Dev  uint64       `msgpack:"d"`
	Meta []byte       `msgpack:"x"`
}

func encodeMetadata(md metadata) ([]byte, error) {
	md.Magic = mdMagic
	return msgpack.Marshal(&md)
}

// errBadMetadata is the cause of every decoding failure.
var errBadMetadata = errors.New("not loopback agent metadata")

// decodeMetadata parses and checks a blob. It never panics, whatever the
// bytes, and allocates no more than a small multiple of len(b): a refused
// blob costs what it weighs, however large the lengths it claims.
func decodeMetadata(b []byte) (md metadata, err error) {
	if len(b) == 0 {
		return metadata{}, fmt.Errorf("%w: empty blob", errBadMetadata)
	}
	if len(b) > maxMetadataLen {
		return metadata{}, fmt.Errorf("%w: %d bytes is over the %d-byte limit", errBadMetadata, len(b), maxMetadataLen)
	}
	// The shape check bounds every length the decoder will see by the
	// blob's own size; the decoder is a fresh one, not msgpack's pooled
	// ones, so no buffer it grows outlives the call.
	if err := checkShape(b); err != nil {
		return metadata{}, fmt.Errorf("%w: %v", errBadMetadata, err)
	}
	if err := msgpack.NewDecoder(bytes.NewReader(b)).Decode(&md); err != nil {
		return metadata{}, fmt.Errorf("%w: %v", errBadMetadata, err)
	}
	if md.Magic != mdMagic {
		return metadata{}, fmt.Errorf("%w: format tag %q, want %q", errBadMetadata, md.Magic, mdMagic)
	}
	if md.Agent == "" {
		return metadata{}, fmt.Errorf("%w: empty agent name", errBadMetadata)
	}
	for i, r := range md.Regions {
		if r.Mem != nixl.DRAM {
			return metadata{}, fmt.Errorf("%w: region %d has memory type %v; loopback agents share DRAM only", errBadMetadata, i, r.Mem)
		}
		if r.Len == 0 || r.Addr+r.Len < r.Addr {
			return metadata{}, fmt.Errorf("%w: region %d [%#x, +%d) is empty or wraps around", errBadMetadata, i, r.Addr, r.Len)
		}
	}
	return md, nil
}

func (r mdRegion) region() region {
	return region{Desc: nixl.Desc{Addr: r.Addr, Len: r.Len, DevID: r.Dev}, meta: r.Meta}
}

func toMDRegions(rs []region) mdRegions {
	out := make(mdRegions, len(rs))
	for i, r := range rs {
		out[i] = mdRegion{Mem: nixl.DRAM, Addr: r.Addr, Len: r.Len, Dev: r.DevID, Meta: r.meta}
	}
	return out
}
