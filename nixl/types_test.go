package nixl

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestEnumValuesMatchNIXL(t *testing.T) {
	// nixl_mem_t, nixl_xfer_op_t and nixl_thread_sync_t values.
	assert.Equal(t, []int32{0, 1, 2, 3, 4}, []int32{int32(DRAM), int32(VRAM), int32(BLK), int32(OBJ), int32(FILE)})
	assert.Equal(t, []int32{0, 1}, []int32{int32(Read), int32(Write)})
	assert.Equal(t, []int32{0, 1, 2}, []int32{int32(SyncNone), int32(SyncStrict), int32(SyncRW)})
	assert.Equal(t, int32(0), int32(CostAnalyticalBackend))
}

func TestEnumStrings(t *testing.T) {
	assert.Equal(t, []string{"DRAM", "VRAM", "BLK", "OBJ", "FILE", "MemType(9)"},
		[]string{DRAM.String(), VRAM.String(), BLK.String(), OBJ.String(), FILE.String(), MemType(9).String()})
	assert.Equal(t, []string{"READ", "WRITE", "XferOp(5)"}, []string{Read.String(), Write.String(), XferOp(5).String()})
	assert.Equal(t, []string{"NIXL_THREAD_SYNC_NONE", "NIXL_THREAD_SYNC_STRICT", "NIXL_THREAD_SYNC_RW"},
		[]string{SyncNone.String(), SyncStrict.String(), SyncRW.String()})
	assert.Equal(t, "ANALYTICAL_BACKEND", CostAnalyticalBackend.String())
	assert.Equal(t, "nixl_cost_t(3)", CostMethod(3).String())
}

func TestListTotals(t *testing.T) {
	l := XferList{Mem: DRAM, Descs: []Desc{{Addr: 1, Len: 10}, {Addr: 100, Len: 32}}}
	assert.Equal(t, uint64(42), l.TotalBytes())
	assert.Zero(t, XferList{}.TotalBytes())

	n := Notifs{"a": {[]byte("x"), []byte("y")}, "b": {nil}}
	assert.Equal(t, 3, n.Count())
	assert.Zero(t, Notifs(nil).Count())
}

func TestNotifOptions(t *testing.T) {
	o := NotifOptions(nil)
	assert.NotNil(t, o.Notif, "a nil message must still request an (empty) notification")
	assert.Empty(t, o.Notif)
	assert.Equal(t, []byte("req-1:2"), NotifOptions([]byte("req-1:2")).Notif)
}

func TestConfigDefaults(t *testing.T) {
	c := Config{}.withDefaults()
	assert.Equal(t, uint16(8888), c.ListenPort)
	assert.Equal(t, 100*time.Millisecond, c.ListenThreadDelay)
	assert.Equal(t, 5*time.Second, c.EtcdWatchTimeout)
	assert.Zero(t, c.ProgressThreadDelay)

	set := Config{ListenPort: 9000, ListenThreadDelay: time.Millisecond, EtcdWatchTimeout: time.Second, ProgressThreadDelay: 5 * time.Microsecond}
	assert.Equal(t, set, set.withDefaults())
}
