package sidechannel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// DefaultMaxFrame bounds a frame's body unless configured otherwise. A
// handshake carries one NIXL metadata blob and one layout per rank, tens of
// KiB each, so 16 MiB leaves room for large engines while bounding what a
// bad peer can make us allocate.
const DefaultMaxFrame = 16 << 20

// headerLen is the size of the big-endian uint32 length that precedes every
// frame body.
const headerLen = 4

// ErrFrameTooLarge is returned for a frame whose length exceeds the limit.
var ErrFrameTooLarge = errors.New("sidechannel: frame too large")

// ErrMalformed is matched by errors for frames that arrived whole but do
// not decode.
var ErrMalformed = errors.New("sidechannel: malformed frame")

// WriteFrame writes body as one frame: a 4-byte big-endian length, then body.
func WriteFrame(w io.Writer, body []byte, maxFrame int) error {
	if len(body) > maxFrame {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, len(body), maxFrame)
	}
	buf := make([]byte, headerLen+len(body))
	binary.BigEndian.PutUint32(buf, uint32(len(body)))
	copy(buf[headerLen:], body)
	_, err := w.Write(buf)
	return err
}

// ReadFrame reads one frame and returns its body. A clean end of stream
// before the header gives io.EOF; a stream cut inside a frame gives
// io.ErrUnexpectedEOF; a length over maxFrame gives ErrFrameTooLarge before
// anything is allocated.
func ReadFrame(r io.Reader, maxFrame int) ([]byte, error) {
	var hdr [headerLen]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if uint64(n) > uint64(maxFrame) {
		return nil, fmt.Errorf("%w: header says %d bytes, limit %d", ErrFrameTooLarge, n, maxFrame)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("sidechannel: frame of %d bytes cut short: %w", n, err)
	}
	return body, nil
}
