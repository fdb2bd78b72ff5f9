package nixl

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// nixlStatuses lists every nixl_status_t with its value and NIXL name, as in
// nixl_types.h.
var nixlStatuses = []struct {
	s     Status
	value int32
	name  string
	err   error
}{
	{StatusInProgress, 1, "NIXL_IN_PROG", nil},
	{StatusSuccess, 0, "NIXL_SUCCESS", nil},
	{StatusNotPosted, -1, "NIXL_ERR_NOT_POSTED", ErrNotPosted},
	{StatusInvalidParam, -2, "NIXL_ERR_INVALID_PARAM", ErrInvalidParam},
	{StatusBackend, -3, "NIXL_ERR_BACKEND", ErrBackend},
	{StatusNotFound, -4, "NIXL_ERR_NOT_FOUND", ErrNotFound},
	{StatusMismatch, -5, "NIXL_ERR_MISMATCH", ErrMismatch},
	{StatusNotAllowed, -6, "NIXL_ERR_NOT_ALLOWED", ErrNotAllowed},
	{StatusRepostActive, -7, "NIXL_ERR_REPOST_ACTIVE", ErrRepostActive},
	{StatusUnknown, -8, "NIXL_ERR_UNKNOWN", ErrUnknown},
	{StatusNotSupported, -9, "NIXL_ERR_NOT_SUPPORTED", ErrNotSupported},
	{StatusRemoteDisconnect, -10, "NIXL_ERR_REMOTE_DISCONNECT", ErrRemoteDisconnect},
	{StatusCanceled, -11, "NIXL_ERR_CANCELED", ErrCanceled},
	{StatusNoTelemetry, -12, "NIXL_ERR_NO_TELEMETRY", ErrNoTelemetry},
}

func TestStatusValuesAndNames(t *testing.T) {
	require.Len(t, nixlStatuses, 14)
	for _, tc := range nixlStatuses {
		assert.Equal(t, tc.value, int32(tc.s), tc.name)
		assert.Equal(t, tc.name, tc.s.String())
		assert.Equal(t, tc.value < 0, tc.s.IsError(), tc.name)
	}
	assert.Equal(t, "nixl_status_t(-13)", Status(-13).String())
	assert.Equal(t, "nixl_status_t(2)", Status(2).String())
}

func TestErrorMatchesOnlyItsSentinel(t *testing.T) {
	for _, tc := range nixlStatuses {
		if tc.err == nil {
			continue
		}
		e := &Error{Op: "nixlAgent::registerMem", Status: tc.s, Msg: "detail"}
		wrapped := fmt.Errorf("connector: %w", e)
		for _, other := range nixlStatuses {
			if other.err == nil {
				continue
			}
			assert.Equal(t, other.s == tc.s, errors.Is(e, other.err), "%s vs %s", tc.name, other.name)
			assert.Equal(t, other.s == tc.s, errors.Is(wrapped, other.err), "wrapped %s vs %s", tc.name, other.name)
		}
		assert.False(t, errors.Is(e, ErrClosed))
		assert.False(t, errors.Is(e, ErrUnavailable))
		assert.Equal(t, "nixl: "+tc.name, tc.err.Error())
	}
}

func TestErrorText(t *testing.T) {
	e := &Error{Op: "nixlAgent::prepXferDlist", Status: StatusNotFound, Msg: `remote agent "B"`}
	assert.Equal(t, `nixl: nixlAgent::prepXferDlist: NIXL_ERR_NOT_FOUND: remote agent "B"`, e.Error())
	e.Msg = ""
	assert.Equal(t, "nixl: nixlAgent::prepXferDlist: NIXL_ERR_NOT_FOUND", e.Error())
}

func TestErrorOfNonFailingStatusMatchesNoSentinel(t *testing.T) {
	e := &Error{Op: "nixlAgent::getXferTelemetry", Status: StatusInProgress}
	assert.Nil(t, e.Unwrap())
	for _, tc := range nixlStatuses {
		if tc.err != nil {
			assert.False(t, errors.Is(e, tc.err), tc.name)
		}
	}
	assert.Equal(t, StatusInProgress, StatusOf(e))
}

func TestNewError(t *testing.T) {
	e := NewError("loopback::postXferReq", StatusRemoteDisconnect, "peer %q gone after %d bytes", "B", 42)
	assert.Equal(t, `nixl: loopback::postXferReq: NIXL_ERR_REMOTE_DISCONNECT: peer "B" gone after 42 bytes`, e.Error())
	assert.ErrorIs(t, e, ErrRemoteDisconnect)
	assert.Equal(t, StatusRemoteDisconnect, StatusOf(e))
}

func TestStatusOf(t *testing.T) {
	assert.Equal(t, StatusSuccess, StatusOf(nil))
	for _, tc := range nixlStatuses {
		if tc.err == nil {
			continue
		}
		assert.Equal(t, tc.s, StatusOf(&Error{Op: "x", Status: tc.s}), tc.name)
		assert.Equal(t, tc.s, StatusOf(fmt.Errorf("a: %w", &Error{Op: "x", Status: tc.s})), tc.name)
		assert.Equal(t, tc.s, StatusOf(tc.err), tc.name)
		assert.Equal(t, tc.s, StatusOf(fmt.Errorf("b: %w", tc.err)), tc.name)
	}
	assert.Equal(t, StatusUnknown, StatusOf(io.EOF))
	assert.Equal(t, StatusUnknown, StatusOf(ErrClosed))
	assert.Equal(t, StatusUnknown, StatusOf(ErrUnavailable))
}

func TestCheckStatus(t *testing.T) {
	s, err := checkStatus("op", StatusInProgress)
	assert.Equal(t, StatusInProgress, s)
	assert.NoError(t, err)
	s, err = checkStatus("op", StatusSuccess)
	assert.Equal(t, StatusSuccess, s)
	assert.NoError(t, err)
	s, err = checkStatus("op", StatusBackend)
	assert.Equal(t, StatusBackend, s)
	assert.ErrorIs(t, err, ErrBackend)
}
