package lograte

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestLimiterOneLinePerInterval(t *testing.T) {
	now := time.Unix(0, 0)
	l := New(10*time.Second, func() time.Time { return now })
	type got struct {
		ok   bool
		left uint64
	}
	allow := func() got { ok, left := l.Allow(); return got{ok, left} }

	assert.Equal(t, got{true, 0}, allow(), "the first line goes out")
	assert.Equal(t, got{false, 0}, allow())
	now = now.Add(10*time.Second - time.Nanosecond)
	assert.Equal(t, got{false, 0}, allow(), "still within the interval")
	now = now.Add(time.Nanosecond)
	assert.Equal(t, got{true, 2}, allow(), "the next interval's first line says how many were left out")
	now = now.Add(time.Hour)
	assert.Equal(t, got{true, 0}, allow(), "none left out since")
}
