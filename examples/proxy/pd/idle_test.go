package pd

import (
	"context"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gonixl/gonixl/internal/oracle"
)

// The default client must let go of an idle connection before a vLLM server
// closes it: the keep-alive vLLM's HTTP servers use is read from the installed
// release (its envs module), not from our reading of it.
func TestDefaultClientDropsIdleConnectionsBeforeVLLM(t *testing.T) {
	tr, ok := defaultClient().Transport.(*http.Transport)
	if !ok {
		t.Fatalf("default client's transport is %T, want *http.Transport", defaultClient().Transport)
	}
	if tr.IdleConnTimeout != IdleConnTimeout || IdleConnTimeout <= 0 {
		t.Fatalf("IdleConnTimeout %v, const %v", tr.IdleConnTimeout, IdleConnTimeout)
	}
	py := oracle.Python(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Its default, not a value the caller's environment sets.
	cmd := exec.CommandContext(ctx, py, "-c", "import os; os.environ.pop('VLLM_HTTP_TIMEOUT_KEEP_ALIVE', None); import vllm.envs as e; print(e.VLLM_HTTP_TIMEOUT_KEEP_ALIVE)")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("reading vLLM's keep-alive: %v", err)
	}
	secs, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("vLLM's keep-alive %q: %v", out, err)
	}
	if IdleConnTimeout >= time.Duration(secs)*time.Second {
		t.Fatalf("proxy keeps idle connections %v, vLLM closes them after %d s: a request sent as vLLM closes one fails with EOF", IdleConnTimeout, secs)
	}
}
