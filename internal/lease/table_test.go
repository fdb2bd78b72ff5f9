package lease

import (
	"fmt"
	"math/rand"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var t0 = time.Unix(1_000_000, 0)

func newTable(t *testing.T) *Table {
	tab, err := New(30 * time.Second)
	require.NoError(t, err)
	return tab
}

func TestNewRejectsNonPositiveTTL(t *testing.T) {
	_, err := New(0)
	assert.EqualError(t, err, "lease: ttl must be positive, got 0s")
}

func TestExpireStepByStep(t *testing.T) {
	tab := newTable(t)
	require.NoError(t, tab.Add("a", t0))
	require.NoError(t, tab.Add("b", t0.Add(10*time.Second)))
	assert.Equal(t, 2, tab.Len())

	assert.Empty(t, tab.Expire(t0.Add(29*time.Second)))
	assert.Equal(t, []string{"a"}, tab.Expire(t0.Add(30*time.Second)), "deadline is inclusive")
	assert.Empty(t, tab.Expire(t0.Add(30*time.Second)), "an id expires once")
	assert.Equal(t, []string{"b"}, tab.Expire(t0.Add(time.Hour)))
	assert.Empty(t, tab.Expire(t0.Add(2*time.Hour)))
	assert.Equal(t, 0, tab.Len())
}

func TestAddDuplicateChangesNothing(t *testing.T) {
	tab := newTable(t)
	require.NoError(t, tab.Add("a", t0))
	assert.EqualError(t, tab.Add("a", t0.Add(time.Minute)), `lease: "a" is already leased`)
	d, ok := tab.Deadline("a")
	require.True(t, ok)
	assert.Equal(t, t0.Add(30*time.Second), d)
}

func TestExtendNeverShortens(t *testing.T) {
	tab := newTable(t)
	require.NoError(t, tab.Add("a", t0))
	assert.True(t, tab.Extend("a", t0.Add(5*time.Second), 20*time.Second))
	d, _ := tab.Deadline("a")
	assert.Equal(t, t0.Add(30*time.Second), d, "now+20s is earlier than the current deadline")

	assert.True(t, tab.Extend("a", t0.Add(25*time.Second), 20*time.Second))
	d, _ = tab.Deadline("a")
	assert.Equal(t, t0.Add(45*time.Second), d)

	assert.Empty(t, tab.Expire(t0.Add(44*time.Second)))
	assert.Equal(t, []string{"a"}, tab.Expire(t0.Add(45*time.Second)))
	assert.False(t, tab.Extend("a", t0.Add(46*time.Second), time.Second), "expired id is not leased")
}

func TestCompleteOnce(t *testing.T) {
	tab := newTable(t)
	require.NoError(t, tab.Add("a", t0))
	require.NoError(t, tab.Add("b", t0))
	assert.True(t, tab.Complete("a"))
	assert.False(t, tab.Complete("a"))
	assert.False(t, tab.Complete("zzz"))
	assert.Equal(t, []string{"b"}, tab.Expire(t0.Add(time.Hour)))
	assert.False(t, tab.Complete("b"), "expired id cannot complete")
}

func TestNext(t *testing.T) {
	tab := newTable(t)
	_, ok := tab.Next()
	assert.False(t, ok)
	require.NoError(t, tab.Add("late", t0.Add(time.Second)))
	require.NoError(t, tab.Add("early", t0))
	n, ok := tab.Next()
	require.True(t, ok)
	assert.Equal(t, t0.Add(30*time.Second), n)
	tab.Complete("early")
	n, _ = tab.Next()
	assert.Equal(t, t0.Add(31*time.Second), n)
}

// TestRandomAgainstModel checks the heap against a plain map model: the same
// ids are held, and Expire returns exactly the ids whose deadline passed.
func TestRandomAgainstModel(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	tab := newTable(t)
	model := map[string]time.Time{}
	now := t0
	for step := 0; step < 20000; step++ {
		now = now.Add(time.Duration(rng.Intn(1000)) * time.Millisecond)
		id := fmt.Sprintf("r%d", rng.Intn(500))
		switch rng.Intn(4) {
		case 0:
			err := tab.Add(id, now)
			if _, held := model[id]; held {
				require.Error(t, err)
			} else {
				require.NoError(t, err)
				model[id] = now.Add(30 * time.Second)
			}
		case 1:
			by := time.Duration(rng.Intn(40)) * time.Second
			_, held := model[id]
			require.Equal(t, held, tab.Extend(id, now, by))
			if held && now.Add(by).After(model[id]) {
				model[id] = now.Add(by)
			}
		case 2:
			_, held := model[id]
			require.Equal(t, held, tab.Complete(id))
			if held {
				delete(model, id)
			}
		case 3:
			var want []string
			for mid, d := range model {
				if !d.After(now) {
					want = append(want, mid)
				}
			}
			got := tab.Expire(now)
			sort.Strings(want)
			sorted := append([]string(nil), got...)
			sort.Strings(sorted)
			require.Equal(t, want, sorted)
			for _, g := range got {
				delete(model, g)
			}
		}
		require.Equal(t, len(model), tab.Len())
	}
}
