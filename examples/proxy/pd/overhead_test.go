package pd

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestLegClockOverhead(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }

	var none legClock
	require.Equal(t, ms(50), none.overhead(at(0), at(50)), "no leg: all the proxy's")

	// Pull: prefill [2, 30], decode [33, first token at 45 and on].
	var pull legClock
	p := pull.begin(at(2))
	pull.end(p, at(30))
	pull.begin(at(33))
	require.Equal(t, ms(2+3), pull.overhead(at(0), at(45)))

	// Push: both legs at once, overlapping; a retried prefill leg.
	var push legClock
	d := push.begin(at(1))
	a := push.begin(at(1))
	push.end(a, at(10)) // failed attempt
	b := push.begin(at(14))
	push.end(b, at(40))
	require.Equal(t, ms(1), push.overhead(at(0), at(60)), "decode was in flight throughout")
	push.end(d, at(20))
	require.Equal(t, ms(1+20), push.overhead(at(0), at(60)))

	// Legs outside [start, at] count only inside; ends are kept once.
	var clip legClock
	c := clip.begin(at(-5))
	clip.end(c, at(5))
	clip.end(c, at(9))
	clip.begin(at(70))
	require.Equal(t, ms(45), clip.overhead(at(0), at(50)))
	clip.end(99, at(1)) // no such leg: nothing
}
