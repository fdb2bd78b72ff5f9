package sidechannel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// DefaultMaxFrame bounds a frame's body unless configured otherwise: the
// client's limit for replies. A handshake reply carries one NIXL metadata
// blob and one layout per rank, tens of KiB each, so 16 MiB leaves room for
// large engines while bounding what a bad peer can make us allocate.
const DefaultMaxFrame = 16 << 20

// DefaultMaxRequestFrame bounds the frames a Server reads unless configured
// otherwise. Clients send only hellos. A handshake hello holds an engine id,
// a 32-character hash and the compatibility facts (a model name or path, at
// most PATH_MAX = 4096 bytes, a dtype, a layout name and a mode): under
// 8 KiB even for absurdly long names. The largest is a hold query, which
// adds up to handshake.MaxExtendIDs (4096) request ids of up to
// notif.MaxIDLen (1024) bytes: 4096 x (1024 + 3) = 4,206,592 bytes, so
// about 4.02 MiB in all; 4 MiB + 64 KiB covers it (a test checks it does).
// Bodies are read as they arrive, so a client that claims this much but
// sends less costs only what it sent.
const DefaultMaxRequestFrame = 4<<20 + 64<<10

// headerLen is the size of the big-endian uint32 length that precedes every
// frame body.
const headerLen = 4

// readChunk is the most a frame reader allocates ahead of the bytes it has
// received: a body grows as it arrives, so memory follows what the peer
// sent, not what its header claims.
const readChunk = 16 << 10

// ErrFrameTooLarge is returned for a frame whose length exceeds the limit.
var ErrFrameTooLarge = errors.New("sidechannel: frame too large")

// ErrMalformed is matched by errors for frames that arrived whole but do
// not decode.
var ErrMalformed = errors.New("sidechannel: malformed frame")

// ErrSpeaksHTTP is matched by the error for a stream that starts like HTTP
// ("GET ", "POST", "HTTP", ...) instead of with a frame header: the peer is
// an HTTP server or client, most often because it was given an engine's API
// port instead of its side-channel port, or the other way round. The error
// also matches ErrMalformed.
var ErrSpeaksHTTP = errors.New("sidechannel: peer speaks HTTP")

// httpError is the error for a frame header that is the start of HTTP.
type httpError struct{ start [headerLen]byte }

func (e *httpError) Error() string {
	return "sidechannel: peer speaks HTTP (its bytes start with " + strconv.Quote(string(e.start[:])) +
		"), not the side-channel protocol: is this the engine's API port instead of its side-channel port?"
}

func (e *httpError) Is(target error) bool { return target == ErrSpeaksHTTP || target == ErrMalformed }

// looksLikeHTTP reports whether a frame header is the start of an HTTP
// request or response. Read as lengths these are all over 1 GiB, so no
// frame within any sane limit starts so.
func looksLikeHTTP(hdr [headerLen]byte) bool {
	switch string(hdr[:]) {
	case "GET ", "POST", "HTTP", "PUT ", "HEAD", "DELE", "PATC", "OPTI", "CONN", "PRI ":
		return true
	}
	return false
}

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
// anything is allocated; a stream that starts like HTTP gives an error
// matching ErrSpeaksHTTP. The body is read in bounded chunks, so a header
// that claims more than the peer sends costs at most a few times what it
// did send.
func ReadFrame(r io.Reader, maxFrame int) ([]byte, error) {
	n, err := readHeader(r, maxFrame)
	if err != nil {
		return nil, err
	}
	return readBody(r, n)
}

// readHeader reads a frame header and checks its length against maxFrame.
func readHeader(r io.Reader, maxFrame int) (int, error) {
	var hdr [headerLen]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, err
	}
	if looksLikeHTTP(hdr) {
		return 0, &httpError{start: hdr}
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if uint64(n) > uint64(maxFrame) {
		return 0, fmt.Errorf("%w: header says %d bytes, limit %d", ErrFrameTooLarge, n, maxFrame)
	}
	return int(n), nil
}

// readBody reads the n-byte body of a frame, growing its buffer as bytes
// arrive: at most readChunk, or as much again as was received, ahead.
func readBody(r io.Reader, n int) ([]byte, error) {
	body := make([]byte, 0, min(n, readChunk))
	for len(body) < n {
		if len(body) == cap(body) {
			grown := make([]byte, len(body), min(n, 2*len(body)+readChunk))
			copy(grown, body)
			body = grown
		}
		m, err := io.ReadFull(r, body[len(body):cap(body)])
		body = body[:len(body)+m]
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, fmt.Errorf("sidechannel: frame of %d bytes cut short after %d: %w", n, len(body), err)
		}
	}
	return body, nil
}
