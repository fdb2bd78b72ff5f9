//go:build !cuda

package cudamem

import (
	"errors"
	"testing"
)

func TestUnavailableWithoutTag(t *testing.T) {
	if _, err := Open(0); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Open without the cuda tag: got %v, want ErrUnavailable", err)
	}
	if _, err := Count(); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Count without the cuda tag: got %v, want ErrUnavailable", err)
	}
}
