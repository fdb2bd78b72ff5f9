package server_test

import (
	"strings"
	"testing"

	"github.com/gonixl/gonixl/examples/engine/server"
	"github.com/gonixl/gonixl/nixl"
	"github.com/gonixl/gonixl/nixl/loopback"
)

// A push prefill engine of 2 pipeline stages x TP 2 (one layer each) into
// decode TP 2: every layer's KV arrives, the text is the one prefill gives
// when it serves the request itself, and every block comes back.
func TestPipelinePrefillPush(t *testing.T) {
	p := newPair(t, server.ConnPush, opts{prefillPP: 2})
	if info := p.prefill.Info(); info.PPSize != 2 || info.TPSize != 2 {
		t.Fatalf("prefill info %+v", info)
	}
	for i, pr := range []string{prompt, prompt + " " + prompt} {
		want := p.complete(t, p.prefill.URL(), "", req(pr, 5)).Choices[0].Text
		if got := p.disagg(t, "pp-"+string(rune('a'+i)), req(pr, 5)).Choices[0].Text; got != want {
			t.Errorf("prompt %d: text %q, want %q", i, got, want)
		}
	}
	// Both prompts' blocks (16 tokens each), every layer of every head: 2
	// regions per layer x 2 layers x 4 heads x 16 bytes per token.
	var n uint64
	for _, pr := range []string{prompt, prompt + " " + prompt} {
		n += uint64((len(strings.Fields(pr)) + 15) / 16 * 16)
	}
	if st := p.decode.Stats(); st.KVVerifyFailures != 0 || st.KVBytesVerified != 2*2*4*16*n || st.RequestsDone != 2 {
		t.Errorf("decode stats %+v, want %d bytes verified", st, 2*2*4*16*n)
	}
	idle(t, p)
}

// An engine that cannot be pipeline-parallel says which field and why.
func TestPipelineRefusals(t *testing.T) {
	fab, err := loopback.NewFabric()
	if err != nil {
		t.Fatal(err)
	}
	defer fab.Close()
	newAgent := func(name string) (nixl.Agent, error) { return fab.NewAgent(name) }
	for _, tc := range []struct {
		role, conn string
		pp         int
		want       string
	}{
		{server.RoleDecode, server.ConnPush, 2, `engine: Config.PPSize is 2 with role "decode": only a prefill engine may be pipeline-parallel (decode holds every layer)`},
		{server.RolePrefill, server.ConnPull, 2, `engine: Config.PPSize is 2 with connector "pull": pipeline-parallel prefill needs the push connector (pull refuses prefill PP > 1)`},
		{server.RolePrefill, server.ConnPush, 3, `engine: Config.PPSize is 3, more than the model's 2 layers`},
		{server.RolePrefill, server.ConnPush, -1, `engine: Config.PPSize is -1, want >= 1 (0: 1)`},
	} {
		_, err := server.New(server.Config{Role: tc.role, Connector: tc.conn, Model: tiny, PPSize: tc.pp, NewAgent: newAgent})
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s/%s PP %d: error %v, want %q", tc.role, tc.conn, tc.pp, err, tc.want)
		}
	}
}
