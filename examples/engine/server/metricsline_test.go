package server_test

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/gonixl/gonixl/examples/engine/server"
)

// lockedBuffer is a log sink the connectors' goroutines write to while the
// test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// The connectors' JSON log lines, the metrics line first, name the rank
// once: the engine hands them its logger untagged, as each rank tags its
// own lines with engine_id, tp_rank and role.
func TestConnectorLinesTagTheRankOnce(t *testing.T) {
	var sink lockedBuffer
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(&sink), zap.InfoLevel))
	p := newPair(t, server.ConnPull, opts{connLog: log, statsInterval: time.Millisecond})
	p.disagg(t, "tag-1", req(prompt, 2))
	metricsLines := func() (out []string) {
		for _, l := range strings.Split(sink.String(), "\n") {
			if strings.Contains(l, `"msg":"KV Transfer metrics: `) {
				out = append(out, l)
			}
		}
		return out
	}
	eventually(t, "decode's metrics line", func() bool {
		for _, l := range metricsLines() {
			if strings.Contains(l, `"role":"decode"`) {
				return true
			}
		}
		return false
	})
	for _, l := range metricsLines() {
		for _, key := range []string{`"tp_rank":`, `"engine_id":`, `"role":`} {
			if n := strings.Count(l, key); n != 1 {
				t.Errorf("%s %d times in %s", key, n, l)
			}
		}
	}
}
