package pushconn

// RequestOption adds optional facts to Consumer.Register or
// Producer.RequestFinished.
type RequestOption func(*requestOpts)

type requestOpts struct {
	transferID string
	tokens     int
}

// WithTransferID sets a router-assigned transfer id that both sides carry;
// prefill matches on it before request ids.
func WithTransferID(id string) RequestOption {
	return func(o *requestOpts) { o.transferID = id }
}

// WithTokens gives prefill the request's prompt length in tokens. It is
// needed only when prefill's blocks are larger than decode's and decode
// had a prefix-cache hit: block counts alone then leave the number of
// decode's cached blocks ambiguous.
func WithTokens(n int) RequestOption {
	return func(o *requestOpts) { o.tokens = n }
}

func applyOpts(opts []RequestOption) requestOpts {
	var o requestOpts
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	return o
}
