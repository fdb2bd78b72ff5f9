package connector_test

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/gonixl/gonixl/connector"
	"github.com/gonixl/gonixl/descriptors"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// A program that logs with log/slog gives the connectors a zap.Logger over
// its slog.Handler: slogCore below, a zapcore.Core of a few lines, needs
// nothing beyond zap and the standard library. EngineConfig.Logger reaches
// every rank whose RankConfig names no Logger.
func Example_slog() {
	h := slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{} // for a stable Output below
		}
		return a
	}})
	log := zap.New(slogCore{h: h})

	fab, _ := loopback.NewFabric()
	defer fab.Close()
	geom := descriptors.Geometry{Layers: 1, KVHeads: 1, HeadDim: 8, DType: "bfloat16", BlockSize: 16, Blocks: 4, TPSize: 1}
	e, err := connector.NewEngine(connector.EngineConfig{EngineID: "prefill", Model: "toy", Geometry: geom, Logger: log})
	if err != nil {
		panic(err)
	}
	defer e.Close()
	a, _ := fab.NewAgent("prefill-0")
	defer a.Close()
	mem, _ := nixl.AllocBuffer(int(geom.RankBytes()))
	defer mem.Free()
	lay, _ := geom.Layout(nixl.DRAM, 0, mem.RegDesc().Desc)
	p, err := e.NewProducer(connector.RankConfig{Agent: a, Layout: lay})
	if err != nil {
		panic(err)
	}
	defer p.Close()
	p.RequestFinished(connector.Request{ID: "r1", Blocks: [][]int{{0}}})
	p.DropHolds("shutting down", 0) // logs on the Engine's logger
	// Output:
	// level=INFO msg="pullconn: dropped holds no decode engine is reading" engine_id=prefill tp_rank=0 role=prefill dropped=1 kept=0 why="shutting down"
}

// slogCore is a zapcore.Core that writes into a slog.Handler.
type slogCore struct{ h slog.Handler }

func (c slogCore) Enabled(l zapcore.Level) bool {
	return c.h.Enabled(context.Background(), slogLevel(l))
}

func (c slogCore) With(fs []zapcore.Field) zapcore.Core { return slogCore{c.h.WithAttrs(attrs(fs))} }

func (c slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c slogCore) Write(e zapcore.Entry, fs []zapcore.Field) error {
	r := slog.NewRecord(e.Time, slogLevel(e.Level), e.Message, 0)
	r.AddAttrs(attrs(fs)...)
	return c.h.Handle(context.Background(), r)
}

func (c slogCore) Sync() error { return nil }

// attrs turns zap fields into slog attributes, in the fields' order.
func attrs(fs []zapcore.Field) []slog.Attr {
	out := make([]slog.Attr, 0, len(fs))
	for _, f := range fs {
		enc := zapcore.NewMapObjectEncoder()
		f.AddTo(enc)
		keys := make([]string, 0, len(enc.Fields))
		for k := range enc.Fields {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, strings.Compare)
		for _, k := range keys {
			out = append(out, slog.Any(k, enc.Fields[k]))
		}
	}
	return out
}

func slogLevel(l zapcore.Level) slog.Level {
	switch {
	case l >= zapcore.ErrorLevel:
		return slog.LevelError
	case l == zapcore.WarnLevel:
		return slog.LevelWarn
	case l == zapcore.InfoLevel:
		return slog.LevelInfo
	}
	return slog.LevelDebug
}
