package pushconn

// requestOption adds optional facts to Consumer.Register or
// Producer.RequestFinished: an engine gives them as connector.Request's
// TransferID and Tokens (the driver, driver.go, passes them on), so that
// pull and push take them by the same names.
type requestOption func(*requestOpts)

type requestOpts struct {
	transferID string
	tokens     int
	// prefixHits are a grouped registration's prefix-hit blocks per
	// group, set by RegisterGroups and counted once register takes it.
	prefixHits []int
	// layers: Producer.Progress's blocks after the request's final ones
	// are final in the rank's first layers only (withLayers).
	layers int
	// noSeq: Register sends no registration_seq, as vLLM's decode does;
	// only the package's tests set it (withoutSeq), to drive prefill
	// through what a seq-less peer sends.
	noSeq bool
}

// withTransferID sets a router-assigned transfer id that both sides carry;
// prefill matches on it before request ids. An engine in vLLM's protocol
// ignores it, as a vLLM engine ignores the key: it is never sent, and
// matching is by request id.
func withTransferID(id string) requestOption {
	return func(o *requestOpts) { o.transferID = id }
}

// withTokens gives prefill the request's prompt length in tokens. It is
// needed only when prefill's blocks are larger than decode's and decode
// had a prefix-cache hit: block counts alone then leave the number of
// decode's cached blocks ambiguous. Given to Consumer.RegisterGroups it is
// the length decode's lists are aligned to, from which decode counts its
// per-group prefix hits.
func withTokens(n int) requestOption {
	return func(o *requestOpts) { o.tokens = n }
}

// withLayers makes a Producer.Progress report per layer: the blocks after
// those an earlier report gave final in every layer are final in the
// rank's first n layers (connector.Request.FinalLayers; 0, or the
// layout's NumLayers, is a report of blocks final in every layer). The
// driver passes Request.FinalLayers on as this option.
func withLayers(n int) requestOption {
	return func(o *requestOpts) { o.layers = n }
}

// withoutSeq makes Consumer.Register send its PUSH_REG without
// registration_seq, like a vLLM decode. Unexported: a gonixl decode always
// numbers its registrations, and the tests need a seq-less one.
func withoutSeq() requestOption {
	return func(o *requestOpts) { o.noSeq = true }
}

func applyOpts(opts []requestOption) requestOpts {
	var o requestOpts
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	return o
}
