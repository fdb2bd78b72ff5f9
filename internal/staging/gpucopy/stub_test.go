//go:build !cuda

package gpucopy

import (
	"errors"
	"testing"

	"github.com/gonixl/gonixl/internal/staging"
)

// Without the cuda tag the copier is a clear error, never a crash.
func TestStubUnavailable(t *testing.T) {
	c, err := New(0)
	if !errors.Is(err, ErrUnavailable) || c != nil {
		t.Fatalf("New = %v, %v", c, err)
	}
	if _, err := NewWithPTX(0, ""); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("NewWithPTX: %v", err)
	}
	if err := (&Copier{}).Copy([]staging.Seg{{Len: 1}}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Copy: %v", err)
	}
}
