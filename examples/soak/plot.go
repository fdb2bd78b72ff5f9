package main

import (
	"fmt"
	"path/filepath"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// plots writes latency.png (every call's latency by when it started, the
// failed ones apart), free_blocks.png (each engine's free fraction) and
// rss.png (each process's resident memory), time in seconds since the start.
func (r *report) plots(dir string) error {
	lat := plot.New()
	lat.Title.Text = "Latency of each call"
	lat.X.Label.Text, lat.Y.Label.Text = "time since start (s)", "latency (s)"
	groups := map[string]plotter.XYs{}
	for _, p := range r.Phases {
		for _, x := range p.Results {
			name := p.Conn + " ok"
			if x.Outcome != outOK {
				name = p.Conn + " " + x.Outcome
			}
			groups[name] = append(groups[name], plotter.XY{X: x.Start.Sub(r.Began).Seconds(), Y: x.Latency.Seconds()})
		}
	}
	for i, name := range sortedKeys(groups) {
		s, err := plotter.NewScatter(groups[name])
		if err != nil {
			return err
		}
		s.GlyphStyle.Color = plotutil.Color(i)
		s.GlyphStyle.Shape = draw.CircleGlyph{}
		s.GlyphStyle.Radius = vg.Points(1.5)
		lat.Add(s)
		lat.Legend.Add(name, s)
	}
	free := map[string]plotter.XYs{}
	for _, f := range r.Free {
		free[f.Who] = append(free[f.Who], plotter.XY{X: f.At.Seconds(), Y: 100 * f.Free})
	}
	fp := linePlot("Free KV blocks of each engine", "free blocks (%)", free)
	rss := map[string]plotter.XYs{}
	for _, f := range r.Samples {
		rss[f.Who] = append(rss[f.Who], plotter.XY{X: f.At.Seconds(), Y: float64(f.RSS) / (1 << 20)})
	}
	rp := linePlot("Resident memory (VmRSS)", "RSS (MiB)", rss)
	for name, p := range map[string]*plot.Plot{"latency.png": lat, "free_blocks.png": fp, "rss.png": rp} {
		p.Legend.Top = true
		if err := p.Save(10*vg.Inch, 5*vg.Inch, filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("plot %s: %w", name, err)
		}
	}
	return nil
}

func linePlot(title, ylabel string, lines map[string]plotter.XYs) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text, p.Y.Label.Text = "time since start (s)", ylabel
	for i, name := range sortedKeys(lines) {
		l, err := plotter.NewLine(lines[name])
		if err != nil {
			continue
		}
		l.Color = plotutil.Color(i)
		l.Width = vg.Points(1)
		if i >= 7 {
			l.Dashes = []vg.Length{vg.Points(3), vg.Points(2)}
		}
		p.Add(l)
		p.Legend.Add(name, l)
	}
	p.Y.Min = 0
	return p
}

func sortedKeys[V any](m map[string]V) []string {
	k := make([]string, 0, len(m))
	for n := range m {
		k = append(k, n)
	}
	sort.Strings(k)
	return k
}
