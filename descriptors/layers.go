package descriptors

// Per-layer transfers. A prefill engine's forward pass ends layer by
// layer, so the KV of a chunk's blocks is final in layers [0, n) before it
// is final in every layer; a connector that writes each layer as it ends
// (push's per-layer progress) maps the same blocks several times, each
// time for a few of the source's layers. Regions are layer-major, so a
// range of layers is a range of regions: NumRegions()/NumLayers of them
// per layer (two for K and V, one for MLA or KVPacked), and for a pipeline
// stage the layers are the stage's own, counted from its FirstLayer.

// MapLayersInto is MapCoalescedInto for the source's layers [lo, hi)
// only, counted from the source layout's first layer (its FirstLayer for
// a pipeline stage): the lists move the same blocks as MapCoalescedInto's,
// in those layers' regions and no others. Layers the destination does not
// hold move nothing. lo == hi maps nothing (an empty buf). Errors are
// MapCoalescedInto's, and ErrInvalid for a range outside
// [0, src.NumLayers]; on error buf is left unchanged.
func MapLayersInto(buf *Transfer, src, dst *Layout, req Request, lo, hi int) (Stats, error) {
	if buf == nil {
		return Stats{}, invalidf("MapLayersInto: buf is nil")
	}
	if lo < 0 || hi < lo || hi > src.NumLayers {
		return Stats{}, invalidf("layers [%d, %d) outside the source's %d", lo, hi, src.NumLayers)
	}
	p, err := newPlan(src, dst, req)
	if err != nil {
		return Stats{}, err
	}
	// p.src and p.dst are the stage views (the model layers both hold);
	// narrow them to the model layers asked for.
	vlo, vhi := max(p.src.FirstLayer, src.FirstLayer+lo), min(p.src.FirstLayer+p.src.NumLayers, src.FirstLayer+hi)
	if vlo >= vhi || len(req.DstBlocks) == 0 {
		p.fill(buf, true, 0)
		buf.regionPairs = -1
		return Stats{}, nil
	}
	s, d := p.src.layerView(vlo, vhi), p.dst.layerView(vlo, vhi)
	p.src, p.dst = &s, &d
	n := p.walk(true, nil, nil)
	p.fill(buf, true, n)
	buf.regionPairs = -1
	regions := len(s.Regions)
	return Stats{Before: p.perRegion() * regions, After: n * regions}, nil
}
