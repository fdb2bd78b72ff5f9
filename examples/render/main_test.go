package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestBinaryServesAndShutsDown builds the command, starts it on a free
// port, renders one request, and stops it with SIGTERM: exit status 0.
func TestBinaryServesAndShutsDown(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := filepath.Join(t.TempDir(), "render")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, string(out))
	cmd := exec.Command(bin, "-port", "0", "-workers", "2")
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-done
		}
	}()
	lines := bufio.NewScanner(stderr)
	addr := ""
	for addr == "" && lines.Scan() {
		var rec struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal(lines.Bytes(), &rec) == nil && rec.Msg == "render server listening" {
			addr = rec.Addr
		}
	}
	require.NotEmpty(t, addr, "no listening line")
	go func() {
		for lines.Scan() {
		}
		done <- cmd.Wait()
	}()
	hc := &http.Client{Timeout: 30 * time.Second}
	resp, err := hc.Post("http://"+addr+"/v1/chat/completions/render", "application/json",
		strings.NewReader(`{"messages":[{"role":"user","content":"Hi"}]}`))
	require.NoError(t, err)
	var gen struct {
		TokenIDs []int `json:"token_ids"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&gen))
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, 100277, gen.TokenIDs[0])
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(60 * time.Second):
		t.Fatal("render did not exit within 60 s of SIGTERM")
	}
}
