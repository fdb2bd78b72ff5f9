package nixltest

import (
	"errors"
	"testing"

	"github.com/gonixl/gonixl/nixl"
)

// Factory makes a new, open agent named name, ready to register DRAM from
// nixl.AllocBuffer and to transfer to and notify the other agents the same
// factory makes in the same test (for the native agent: with a backend such
// as UCX created). The suite closes every agent it gets before the test
// ends; a factory may also register its own cleanup, since Close is
// idempotent. Agents need no progress thread: the suite's waits poll
// (GetNotifs, XferStatus) every agent of the test.
type Factory func(t *testing.T, name string) nixl.Agent

// suiteCase is one behaviour the suite checks.
type suiteCase struct {
	name string
	run  func(*env)
}

// Cases returns the names of the suite's subtests, in the order it runs
// them (for -run patterns and reports).
func Cases() []string {
	out := make([]string, len(cases))
	for i, c := range cases {
		out[i] = c.name
	}
	return out
}

// RunAgentSuite runs the conformance suite as subtests of t, each on fresh
// agents from f.
func RunAgentSuite(t *testing.T, f Factory) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(newEnv(t, f)) })
	}
}

var cases = []suiteCase{
	{"Registration", testRegistration},
	{"MetadataExchange", testMetadataExchange},
	{"PartialMetadata", testPartialMetadata},
	{"Write", testWrite},
	{"Read", testRead},
	{"ListsCopied", testListsCopied},
	{"PreparedLists", testPreparedLists},
	{"PreparedListErrors", testPreparedListErrors},
	{"Repost", testRepost},
	{"GenNotifOrder", testGenNotifOrder},
	{"TransferNotifications", testTransferNotifications},
	{"DescriptorErrors", testDescriptorErrors},
	{"UnknownRemote", testUnknownRemote},
	{"Invalidation", testInvalidation},
	{"NotPosted", testNotPosted},
	{"ReleaseTwice", testReleaseTwice},
	{"CloseWhilePolling", testCloseWhilePolling},
	{"ConcurrentTransfers", testConcurrentTransfers},
}

// viaCAPI is set, by the native agent's tests, when the agent under test
// is the binding over NIXL's C API, which reports a failure of the agent
// that its status set lacks as NIXL_ERR_BACKEND (docs/binding.md) and
// cannot ask for IncludeConnInfo.
var viaCAPI bool

// wantErr fails the test unless err matches sentinel, or, with a nil
// sentinel, unless err is non-nil. Over the C API, ErrBackend stands for
// any failure sentinel but ErrClosed, which gonixl reports itself.
func (e *env) wantErr(err, sentinel error, what string) {
	e.t.Helper()
	switch {
	case err == nil:
		if sentinel == nil {
			e.t.Errorf("%s: got no error, want one", what)
		} else {
			e.t.Errorf("%s: got no error, want %v", what, sentinel)
		}
	case viaCAPI && sentinel != nil && sentinel != nixl.ErrClosed && errors.Is(err, nixl.ErrBackend):
	case sentinel != nil && !errors.Is(err, sentinel):
		e.t.Errorf("%s: got %s, want %v", what, describe(err), sentinel)
	}
}

// noErr fails the test at once on an error.
func (e *env) noErr(err error, what string) {
	e.t.Helper()
	if err != nil {
		e.t.Fatalf("%s: %s", what, describe(err))
	}
}

func isClosed(err error) bool { return errors.Is(err, nixl.ErrClosed) }
