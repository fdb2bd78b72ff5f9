package pushconn

import (
	"go.uber.org/zap"
)

func logger(l *zap.Logger) *zap.Logger {
	if l == nil {
		return zap.NewNop()
	}
	return l
}
