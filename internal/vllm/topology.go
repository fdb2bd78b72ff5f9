package vllm

import "fmt"

// TargetRanks returns the ranks of a remote engine of remoteTP ranks that
// local rank localRank of an engine of localTP ranks handshakes with and
// reads from (vLLM's handshake_target_ranks without DCP): the one rank
// whose heads it holds when it has as many ranks or more, else the k =
// remoteTP/localTP ranks whose heads it holds together. The TP sizes must
// divide each other.
func TargetRanks(localTP, localRank, remoteTP int) ([]int, error) {
	if err := checkTP(localTP, localRank, remoteTP); err != nil {
		return nil, err
	}
	if localTP >= remoteTP {
		return []int{localRank / (localTP / remoteTP)}, nil
	}
	k := remoteTP / localTP
	out := make([]int, k)
	for i := range out {
		out[i] = localRank*k + i
	}
	return out, nil
}

// CompletionCount is the N of a pull completion "<request id>:<N>" a
// decode engine of decodeTP ranks sends a prefill engine of prefillTP
// ranks (vLLM's local consumer count without DCP): how many decode ranks
// notify each prefill rank, max(1, decodeTP/prefillTP). The prefill rank
// frees the request after N completions. Before connector version 12 the N
// was decode's TP size.
func CompletionCount(decodeTP, prefillTP int) int { return max(1, decodeTP/max(prefillTP, 1)) }

// PushCompletions is how many WRITE notifications "<request id>:<prefill
// TP>" a push decode rank waits for: one per pipeline stage of prefill
// times max(1, prefillTP/decodeTP), the prefill ranks that write into it.
func PushCompletions(prefillPP, prefillTP, decodeTP int) int {
	return max(prefillPP, 1) * max(1, prefillTP/max(decodeTP, 1))
}

func checkTP(localTP, localRank, remoteTP int) error {
	switch {
	case localTP < 1 || remoteTP < 1:
		return fmt.Errorf("vllm: TP sizes %d and %d, want >= 1", localTP, remoteTP)
	case localRank < 0 || localRank >= localTP:
		return fmt.Errorf("vllm: rank %d outside TP size %d", localRank, localTP)
	case localTP%remoteTP != 0 && remoteTP%localTP != 0:
		return fmt.Errorf("vllm: TP sizes %d and %d do not divide each other", localTP, remoteTP)
	}
	return nil
}
