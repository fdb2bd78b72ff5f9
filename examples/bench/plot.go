package main

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// modeColors keeps a mode's color the same in every panel.
var modeColors = map[string]color.RGBA{
	"pull":                    {R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	"pull-inline":             {R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	"push":                    {R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	"push-progressive":        {R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	"push-progressive-layers": {R: 0xe3, G: 0x77, B: 0xc2, A: 0xff},
	"push-staged":             {R: 0x17, G: 0xbe, B: 0xcf, A: 0xff},
	"push-progressive-staged": {R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	"collocated":              {R: 0x33, G: 0x33, B: 0x33, A: 0xff},
}

var lenColors = []color.RGBA{{R: 0x94, G: 0x67, B: 0xbd, A: 0xff}, {R: 0x8c, G: 0x56, B: 0x4b, A: 0xff},
	{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}, {R: 0x17, G: 0xbe, B: 0xcf, A: 0xff}, {R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff}}

// lookup finds a point of the sweep.
func (r sweepResult) lookup(mode string, rate float64, inputLen int) (point, bool) {
	for _, p := range r.Points {
		if p.Mode == mode && p.RequestRate == rate && p.InputLen == inputLen {
			return p, true
		}
	}
	return point{}, false
}

// metricPanels plots metric (a key of point.Metrics) against the request
// rate: one panel per input length, one line per mode.
func metricPanels(r sweepResult, metric, ylabel string) ([]*plot.Plot, error) {
	return valuePanels(r, ylabel, func(pt point) (float64, bool) {
		v, ok := pt.Metrics[metric]
		return v, ok
	})
}

// goodput is a point's request goodput, when the sweep had an SLO.
func goodput(pt point) (float64, bool) {
	if pt.RequestGoodput == nil {
		return 0, false
	}
	return *pt.RequestGoodput, true
}

// hasGoodput reports whether any point of the sweep has a goodput.
func hasGoodput(r sweepResult) bool {
	for _, pt := range r.Points {
		if _, ok := goodput(pt); ok {
			return true
		}
	}
	return false
}

// valuePanels plots value (false: no value, no marker) against the request
// rate: one panel per input length, one line per mode.
func valuePanels(r sweepResult, ylabel string, value func(point) (float64, bool)) ([]*plot.Plot, error) {
	var out []*plot.Plot
	for _, n := range r.InputLens {
		p := plot.New()
		p.Title.Text = fmt.Sprintf("input %d tokens", n)
		p.X.Label.Text = "request rate (req/s)"
		p.Y.Label.Text = ylabel
		p.Legend.Top = true
		p.Legend.Left = true
		var ys []float64
		for _, mode := range r.Modes {
			var xys plotter.XYs
			for _, rate := range r.Rates {
				if pt, ok := r.lookup(mode, rate, n); ok {
					if v, ok := value(pt); ok {
						xys = append(xys, plotter.XY{X: rate, Y: v})
						ys = append(ys, v)
					}
				}
			}
			if len(xys) == 0 {
				continue
			}
			if err := addLine(p, mode, xys, modeColors[mode]); err != nil {
				return nil, err
			}
		}
		p.Y.Min, p.Y.Max = yRange(ys)
		out = append(out, p)
	}
	return out, nil
}

// yRange is a metric panel's y axis: from 0, so that panels whose values
// differ by a few percent do not look as if they differed many times over,
// to a tenth above the largest value (1 when there is none above 0). The
// legend sits top left, inside that tenth.
func yRange(ys []float64) (lo, hi float64) {
	for _, y := range ys {
		hi = max(hi, y)
	}
	if !(hi > 0) {
		return 0, 1
	}
	return 0, hi * 1.1
}

// hasPublishedPoint reports whether the sweep's grid has the point of the
// published figure (push and base at 16k tokens and 8 QPS), so that its
// marker is drawn only beside a point it can be compared with.
func hasPublishedPoint(r sweepResult, base string) bool {
	_, push := r.lookup("push", publishedRate, publishedInputLen)
	_, pull := r.lookup(base, publishedRate, publishedInputLen)
	return push && pull
}

// ratioPlot plots push's mean TTFT over pull's (and pull-inline's) against
// the request rate, one line per input length.
func ratioPlot(r sweepResult, base string) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("push / %s mean TTFT", base)
	p.X.Label.Text = "request rate (req/s)"
	p.Y.Label.Text = "ratio"
	p.Y.Min, p.Y.Max = 0, 1.2
	p.Legend.Top, p.Legend.Left = false, true // clear of the published point, bottom right
	for i, n := range r.InputLens {
		var xys plotter.XYs
		for _, rate := range r.Rates {
			push, ok1 := r.lookup("push", rate, n)
			pull, ok2 := r.lookup(base, rate, n)
			if ok1 && ok2 && pull.Metrics["mean_ttft_ms"] > 0 {
				xys = append(xys, plotter.XY{X: rate, Y: push.Metrics["mean_ttft_ms"] / pull.Metrics["mean_ttft_ms"]})
			}
		}
		if len(xys) == 0 {
			continue
		}
		if err := addLine(p, fmt.Sprintf("input %d", n), xys, lenColors[i%len(lenColors)]); err != nil {
			return nil, err
		}
	}
	// The published figure: vLLM's push connector announcement, 16k tokens
	// at 8 QPS, 540 ms against pull's 1744 ms; only on a grid with that
	// point.
	if !hasPublishedPoint(r, base) {
		return p, nil
	}
	ref, err := plotter.NewScatter(plotter.XYs{{X: publishedRate, Y: publishedRatio}})
	if err != nil {
		return nil, err
	}
	ref.Shape = draw.CrossGlyph{}
	ref.Radius = vg.Points(5)
	p.Add(ref)
	p.Legend.Add("published, 16k @ 8 QPS", ref)
	return p, nil
}

// publishedRatio is push's mean TTFT over pull's at 16k tokens and 8 QPS in
// vLLM's announcement (540 ms / 1744 ms).
const publishedRatio = 540.0 / 1744.0

// The published figure's point: 16k (16384) input tokens at 8 QPS.
const (
	publishedRate     = 8.0
	publishedInputLen = 16384
)

func addLine(p *plot.Plot, name string, xys plotter.XYs, c color.RGBA) error {
	l, pts, err := plotter.NewLinePoints(xys)
	if err != nil {
		return err
	}
	l.Color, pts.Color = c, c
	pts.Shape = draw.CircleGlyph{}
	p.Add(l, pts)
	p.Legend.Add(name, l, pts)
	return nil
}

// writePanels writes plots side by side into one SVG file.
func writePanels(path string, plots []*plot.Plot, panelW, panelH vg.Length) error {
	if len(plots) == 0 {
		return fmt.Errorf("%s: nothing to plot", path)
	}
	w := panelW * vg.Length(len(plots))
	canvas := vgsvg.New(w, panelH)
	dc := draw.New(canvas)
	tiles := draw.Tiles{Rows: 1, Cols: len(plots), PadX: vg.Millimeter * 2, PadY: vg.Millimeter * 2,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	grid := [][]*plot.Plot{plots}
	canvases := plot.Align(grid, tiles, dc)
	for i, p := range plots {
		p.Draw(canvases[0][i])
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := canvas.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writePlots writes the sweep's figures into dir: ttft.svg and tpot.svg (a
// panel per input length, a line per mode, collocated among them),
// goodput.svg (the same, of request goodput, when the sweep had an SLO) and
// ttft_ratio.svg (push over pull and over pull-inline). It returns the
// files written.
func writePlots(r sweepResult, dir string) ([]string, error) {
	var files []string
	for _, f := range []struct{ file, metric, label string }{
		{"ttft.svg", "mean_ttft_ms", "mean TTFT (ms)"},
		{"tpot.svg", "mean_tpot_ms", "mean TPOT (ms)"},
	} {
		panels, err := metricPanels(r, f.metric, f.label)
		if err != nil {
			return files, err
		}
		path := filepath.Join(dir, f.file)
		if err := writePanels(path, panels, 9*vg.Centimeter, 8*vg.Centimeter); err != nil {
			return files, err
		}
		files = append(files, path)
	}
	if hasGoodput(r) {
		panels, err := valuePanels(r, fmt.Sprintf("goodput (req/s within %s)", r.Goodput), goodput)
		if err != nil {
			return files, err
		}
		path := filepath.Join(dir, "goodput.svg")
		if err := writePanels(path, panels, 9*vg.Centimeter, 8*vg.Centimeter); err != nil {
			return files, err
		}
		files = append(files, path)
	}
	var ratios []*plot.Plot
	for _, base := range []string{"pull", "pull-inline"} {
		if !slices.Contains(r.Modes, base) || !slices.Contains(r.Modes, "push") {
			continue
		}
		p, err := ratioPlot(r, base)
		if err != nil {
			return files, err
		}
		ratios = append(ratios, p)
	}
	if len(ratios) > 0 {
		path := filepath.Join(dir, "ttft_ratio.svg")
		if err := writePanels(path, ratios, 11*vg.Centimeter, 8*vg.Centimeter); err != nil {
			return files, err
		}
		files = append(files, path)
	}
	return files, nil
}
