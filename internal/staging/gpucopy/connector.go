package gpucopy

import "github.com/gonixl/gonixl/internal/staging"

// NewCopier is New as the connectors hand it out (their NewGPUCopier): a
// staging.Copier, nil with the error, never a typed nil.
func NewCopier(device int) (staging.Copier, error) {
	c, err := New(device)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// CloseCopier closes c when it came from NewCopier; other copiers are
// left alone.
func CloseCopier(c staging.Copier) error {
	if g, ok := c.(*Copier); ok {
		return g.Close()
	}
	return nil
}
