package engine

// ConfigOf returns a rank's configuration given, as a driver's
// NewProducer or NewConsumer takes it, as the connector's own C (or *C)
// or as the shared R (or *R) alone, which wrap turns into a C. ok is false
// for anything else (a nil pointer too): the caller names what it got.
func ConfigOf[C, R any](o any, wrap func(R) C) (c C, ok bool) {
	switch v := o.(type) {
	case C:
		return v, true
	case *C:
		if v != nil {
			return *v, true
		}
	case R:
		return wrap(v), true
	case *R:
		if v != nil {
			return wrap(*v), true
		}
	}
	return c, false
}
