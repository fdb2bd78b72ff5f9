package twohost

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Exit statuses of run.sh.
const (
	exitUsage = 2
	exitSkip  = 77
)

// runScript runs run.sh with args through bash, with env added; with a
// prefix (setpriv ... to drop root) the script comes on stdin, so that a
// user without access to this checkout can run it. It returns the exit
// status, stdout and stderr, and gives the script 10 minutes at most.
func runScript(t *testing.T, prefix, env, args []string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	argv := append([]string{"bash", "run.sh"}, args...)
	var stdin []byte
	if len(prefix) > 0 {
		script, err := os.ReadFile("run.sh")
		require.NoError(t, err)
		stdin = script
		argv = append(append(append([]string{}, prefix...), "bash", "-s", "--"), args...)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdin = bytes.NewReader(stdin)
	cmd.Env = append(os.Environ(), env...)
	cmd.WaitDelay = 30 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), stdout.String(), stderr.String()
	}
	require.NoError(t, err, "run.sh %v", args)
	return 0, stdout.String(), stderr.String()
}

// As a user other than root the script creates nothing and exits 77 with a
// line saying it needs root.
func TestTwoHostScriptSkipsWithoutRoot(t *testing.T) {
	var prefix []string
	if os.Geteuid() == 0 {
		setpriv, err := exec.LookPath("setpriv")
		if err != nil {
			t.Skip("running as root and no setpriv (util-linux) to drop to another user")
		}
		prefix = []string{setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"}
	}
	rc, stdout, stderr := runScript(t, prefix, nil, []string{"-backend", "UCX", "-name", "gnxskip"})
	assert.Equal(t, exitSkip, rc, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	assert.Contains(t, stderr, "twohost: SKIP: needs root to create network namespaces and a veth pair")
	assert.Empty(t, stdout)
	assert.NoFileExists(t, "/run/netns/gnxskip-p")
}

// As root without NIXL the script skips, naming where it looked.
func TestTwoHostScriptSkipsWithoutNIXL(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not root: the script stops at the root check before looking for NIXL")
	}
	rc, stdout, stderr := runScript(t, nil, []string{"NIXL_PREFIX=/nonexistent/nixl"}, []string{"-name", "gnxskip"})
	assert.Equal(t, exitSkip, rc, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	assert.Contains(t, stderr, "twohost: SKIP: no NIXL at /nonexistent/nixl (no include/nixl.h)")
	assert.Empty(t, stdout)
	assert.NoFileExists(t, "/run/netns/gnxskip-p")
}

// Bad flags are usage errors (exit 2) that name the bad value, before any
// check or change.
func TestTwoHostScriptUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-backend", "GDS"}, "twohost: -backend GDS: want UCX, LIBFABRIC or both"},
		{[]string{"-connector", "both"}, "twohost: -connector both: want pull or push"},
		{[]string{"-num-prompts", "0"}, "twohost: 0 is not a positive integer"},
		{[]string{"-name", "Has-Dash"}, "twohost: -name Has-Dash: want 1-10 of [a-z0-9]"},
		{[]string{"-name", "elevenchars"}, "twohost: -name elevenchars: want 1-10 of [a-z0-9]"},
		{[]string{"-rate"}, "usage: run.sh"},
		{[]string{"-bogus", "1"}, "usage: run.sh"},
	} {
		rc, stdout, stderr := runScript(t, nil, nil, tc.args)
		assert.Equal(t, exitUsage, rc, "%v: stderr:\n%s", tc.args, stderr)
		assert.Contains(t, stderr, tc.want, "%v", tc.args)
		assert.Empty(t, stdout, "%v", tc.args)
	}
}
