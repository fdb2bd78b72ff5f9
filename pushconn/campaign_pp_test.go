package pushconn

import (
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFaultCampaignPipeline is the fault campaign (TestFaultCampaign) with
// a prefill engine of 2 pipeline stages x TP 2 pushing into decode TP 2:
// each decode rank counts a completion from one rank of each stage, a
// failure or cancel of either stage fails the request under the same
// write-safety rules, and the rank that closes near the end is stage 0's
// TP rank 0. GONIXL_CAMPAIGN=long runs 5 seeds x 2000 requests; the
// default is 2 seeds x 300.
func TestFaultCampaignPipeline(t *testing.T) {
	seeds, n := 2, 300
	if os.Getenv("GONIXL_CAMPAIGN") == "long" {
		seeds, n = 5, 2000
	}
	if testing.Short() {
		seeds, n = 1, 100
	}
	var total campaignFigures
	for s := range seeds {
		seed := uint64(7000 + s + 1)
		if only := os.Getenv("GONIXL_CAMPAIGN_SEED"); only != "" && only != fmt.Sprint(seed) {
			continue
		}
		t.Run(fmt.Sprintf("pp2xtp2to2/seed%d", seed), func(t *testing.T) {
			f := runCampaignWith(t, seed, n, 2, 2, campaignOpts{pp: 2})
			t.Logf("seed %d: %+v", seed, f)
			total.add(f)
		})
	}
	t.Logf("push campaign PP 2 x TP 2 -> TP 2: %d seeds x %d requests (+%d retries; %d seq-less, %d reusing an id, %d completion copies, %d PUSH_REG copies): %d done, %d failed (%d aborted), %d wrong-byte done results, %d writes after release, %d results or frees twice, %d missing",
		seeds, n, total.retries, total.seqless, total.reused, total.completionCopies, total.regCopies, total.done, total.failed, total.aborted,
		total.wrongBytes, total.writesAfterRelease, total.decodeResultsTwice+total.prefillFreeTwice, total.missingResults+total.missingFrees)
	require.Zero(t, total.wrongBytes, "done results with a wrong byte")
	require.Zero(t, total.writesAfterRelease, "writes into blocks after their release")
	require.Zero(t, total.decodeResultsTwice+total.prefillFreeTwice, "ended or freed twice")
	require.Zero(t, total.missingResults+total.missingFrees, "never ended or never freed")
	require.Positive(t, total.done, "nothing was done")
	require.Positive(t, total.completionCopies, "no late completion copies")
}
