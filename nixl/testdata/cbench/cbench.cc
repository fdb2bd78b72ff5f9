// cbench does, directly through NIXL's C++ API (nixl.h), the transfers that
// gonixl's Go benchmarks do through the binding, so that the binding's
// overhead can be measured as a ratio in one run (see bench_nixl_test.go,
// which builds and runs this program). It is not part of the Go build.
//
// Usage: cbench write64m|roundtrip4k|roundtrip4kx8 ITERATIONS
// Output: one line "RESULT <name> <iterations> <total ns> <bytes per op>
// <process CPU ns>", the CPU time being user plus system time of the whole
// process over the timed loop.
//
// The setup matches the Go side: two agents in one process, no progress
// thread, a UCX backend with ucx_error_handling_mode=none on each, DRAM
// buffers, and both agents progressed while waiting.

#include <nixl.h>

#include <sys/mman.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

long long cpuNs() {
	rusage ru{};
	getrusage(RUSAGE_SELF, &ru);
	return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000LL +
	       (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000LL;
}

void must(nixl_status_t s, const char *what) {
	if (s != NIXL_SUCCESS) {
		std::fprintf(stderr, "cbench: %s failed: %s\n", what, nixlEnumStrings::statusStr(s).c_str());
		std::exit(1);
	}
}

struct side {
	nixlAgent agent;
	char *buf;
	size_t size;

	side(const std::string &name, size_t n) : agent(name, nixlAgentConfig(false)), size(n) {
		nixlBackendH *backend = nullptr;
		must(agent.createBackend("UCX", {{"ucx_error_handling_mode", "none"}}, backend), "createBackend");
		void *p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
		if (p == MAP_FAILED) {
			std::perror("cbench: mmap");
			std::exit(1);
		}
		buf = static_cast<char *>(p);
		std::memset(buf, 0, n);
		nixl_reg_dlist_t reg(DRAM_SEG);
		reg.addDesc(nixlBlobDesc(reinterpret_cast<uintptr_t>(buf), n, 0, ""));
		must(agent.registerMem(reg), "registerMem");
	}
	~side() {
		nixl_reg_dlist_t reg(DRAM_SEG);
		reg.addDesc(nixlBlobDesc(reinterpret_cast<uintptr_t>(buf), size, 0, ""));
		agent.deregisterMem(reg);
		munmap(buf, size);
	}
	nixl_xfer_dlist_t blocks(size_t count, size_t len) const {
		nixl_xfer_dlist_t l(DRAM_SEG);
		l.reserve(count);
		for (size_t i = 0; i < count; i++) l.addDesc(nixlBasicDesc(reinterpret_cast<uintptr_t>(buf) + i * len, len, 0));
		return l;
	}
};

void exchange(side &a, side &b) {
	std::string md, name;
	must(b.agent.getLocalMD(md), "getLocalMD");
	must(a.agent.loadRemoteMD(md, name), "loadRemoteMD");
	must(a.agent.getLocalMD(md), "getLocalMD");
	must(b.agent.loadRemoteMD(md, name), "loadRemoteMD");
}

// waitDone polls the request on the initiator and progresses the target
// until the transfer completes; it counts target notifications in notifs.
void waitDone(side &init, side &target, nixlXferReqH *req, size_t &notifs) {
	nixl_notifs_t n;
	for (;;) {
		nixl_status_t s = init.agent.getXferStatus(req);
		if (s == NIXL_SUCCESS) return;
		if (s != NIXL_IN_PROG) must(s, "getXferStatus");
		n.clear();
		target.agent.getNotifs(n);
		for (auto &kv : n) notifs += kv.second.size();
	}
}

long long write64m(long long iters) {
	const size_t count = 1024, len = 64 << 10, size = count * len;
	side init("cbench.init", size), target("cbench.target", size);
	exchange(init, target);
	nixl_xfer_dlist_t local = init.blocks(count, len), remote = target.blocks(count, len);
	size_t notifs = 0;
	auto one = [&] {
		nixlXferReqH *req = nullptr;
		must(init.agent.createXferReq(NIXL_WRITE, local, remote, "cbench.target", req), "createXferReq");
		nixl_status_t s = init.agent.postXferReq(req);
		if (s < 0) must(s, "postXferReq");
		waitDone(init, target, req, notifs);
		must(init.agent.releaseXferReq(req), "releaseXferReq");
	};
	one();  // connection setup, outside the timing, as in the Go benchmark
	long long cpu = cpuNs();
	auto start = std::chrono::steady_clock::now();
	for (long long i = 0; i < iters; i++) one();
	auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
	cpu = cpuNs() - cpu;
	std::printf("RESULT write64m %lld %lld %zu %lld\n", iters, static_cast<long long>(ns), size, cpu);
	return ns;
}

// roundtrip4k posts k 4 KiB WRITEs, each with a notification, to k
// adjacent slots, and polls until every one is done and the target has seen
// all k notifications: each polling round asks the status of every request,
// in order, then progresses the target, which is the call sequence of both
// the Go like-for-like loop (XferStatus per request) and the Go batched one
// (one Poll per agent makes these same calls). With k == 1 it is the single
// round trip.
long long roundtrip4k(const char *name, long long iters, size_t k) {
	const size_t len = 4096;
	side init("cbench.init", len * k), target("cbench.target", len * k);
	exchange(init, target);
	nixl_opt_args_t opts;
	opts.notif = std::string("rt");
	nixl_xfer_dlist_t src = init.blocks(k, len), dst = target.blocks(k, len);
	std::vector<nixlXferReqH *> reqs(k);
	for (size_t i = 0; i < k; i++) {
		nixl_xfer_dlist_t l(DRAM_SEG), r(DRAM_SEG);
		l.addDesc(src[i]);
		r.addDesc(dst[i]);
		must(init.agent.createXferReq(NIXL_WRITE, l, r, "cbench.target", reqs[i], &opts), "createXferReq");
	}
	size_t notifs = 0;
	nixl_notifs_t n;
	auto progressTarget = [&] {
		n.clear();
		target.agent.getNotifs(n);
		for (auto &kv : n) notifs += kv.second.size();
	};
	auto one = [&] {
		size_t want = notifs + k;
		for (nixlXferReqH *req : reqs) {
			nixl_status_t s = init.agent.postXferReq(req);
			if (s < 0) must(s, "postXferReq");
		}
		for (;;) {
			bool done = true;
			for (nixlXferReqH *req : reqs) {
				nixl_status_t s = init.agent.getXferStatus(req);
				if (s == NIXL_IN_PROG)
					done = false;
				else if (s != NIXL_SUCCESS)
					must(s, "getXferStatus");
			}
			if (done) break;
			progressTarget();
		}
		while (notifs < want) progressTarget();
	};
	one();
	long long cpu = cpuNs();
	auto start = std::chrono::steady_clock::now();
	for (long long i = 0; i < iters; i++) one();
	auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
	cpu = cpuNs() - cpu;
	for (nixlXferReqH *req : reqs) must(init.agent.releaseXferReq(req), "releaseXferReq");
	std::printf("RESULT %s %lld %lld %zu %lld\n", name, iters, static_cast<long long>(ns), len * k, cpu);
	return ns;
}

}  // namespace

int main(int argc, char **argv) {
	if (argc != 3) {
		std::fprintf(stderr, "usage: cbench write64m|roundtrip4k|roundtrip4kx8 ITERATIONS\n");
		return 2;
	}
	long long iters = std::atoll(argv[2]);
	if (iters <= 0) {
		std::fprintf(stderr, "cbench: ITERATIONS must be positive\n");
		return 2;
	}
	std::string what = argv[1];
	if (what == "write64m") {
		write64m(iters);
	} else if (what == "roundtrip4k") {
		roundtrip4k("roundtrip4k", iters, 1);
	} else if (what == "roundtrip4kx8") {
		roundtrip4k("roundtrip4kx8", iters, 8);
	} else {
		std::fprintf(stderr, "cbench: unknown benchmark %s\n", argv[1]);
		return 2;
	}
	return 0;
}
