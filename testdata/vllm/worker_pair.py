"""Two processes of worker.py, vLLM against vLLM, moving KV over NIXL UCX.

Run with the oracle environment's Python:
  UCX_NET_DEVICES=lo $GONIXL_VLLM_VENV/bin/python testdata/vllm/worker_pair.py \
      [--connector pull|push] [--requests 5] [--port 25601] [worker.py flags...]

Starts a prefill and a decode engine, sends --requests requests in a row
(prefill fills its blocks with a seed's pattern, decode loads them into other
block ids and compares every byte with the pattern), checks that one
handshake served them all and that prefill freed each request's blocks, then
sends one more whose decode is told a wrong seed and must report a mismatch
(the comparison can fail). Exits 0 only if all of that held; prints each
event as it comes.
"""

import argparse
import json
import os
import subprocess
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--connector", choices=["pull", "push"], default="pull")
    p.add_argument("--requests", type=int, default=5)
    p.add_argument("--port", type=int, default=25601)
    p.add_argument("--timeout", type=float, default=120.0,
                   help="seconds to wait for any one event")
    args, worker_flags = p.parse_known_args()
    flags = ["--connector", args.connector] + worker_flags

    procs = {}
    for mode, port, eid in (("prefill", args.port, "vllm-prefill"),
                            ("decode", args.port + 1, "vllm-decode")):
        procs[mode] = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "worker.py"), mode, "--port", str(port),
             "--engine-id", eid] + flags,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)

    def event(mode, want):
        box = []
        while True:
            box.clear()
            t = threading.Thread(target=lambda: box.append(procs[mode].stdout.readline()),
                                 daemon=True)
            t.start()
            t.join(args.timeout)
            if not box or not box[0]:
                raise SystemExit("%s: no %s event (%s)" % (mode, want,
                                 "timed out" if not box else "exited"))
            e = json.loads(box[0])
            print(mode, json.dumps(e, sort_keys=True), flush=True)
            if e["event"] == want:
                return e
            if e["event"] in ("error", "failed"):
                raise SystemExit("%s: %s" % (mode, e))

    def send(mode, obj):
        procs[mode].stdin.write(json.dumps(obj) + "\n")
        procs[mode].stdin.flush()

    failures = []
    try:
        ready = {m: event(m, "ready") for m in procs}
        for key in ("compat_hash", "kv_cache_layout", "block_lens", "attn_backend"):
            if ready["prefill"][key] != ready["decode"][key]:
                failures.append("%s differs: %s" % (key, [r[key] for r in ready.values()]))
        for n in range(args.requests + 1):
            wrong_seed = n == args.requests
            seed = 1000 + n
            pblocks = [1 + 3 * n + i for i in range(3)]
            dblocks = [60 - 3 * n - i for i in range(3)]
            base = "req-%d" % n
            send("prefill", {"request_id": base + "-0000aaaa", "blocks": pblocks,
                             "num_tokens": 96, "seed": seed})
            params = event("prefill", "params")
            send("decode", {"request_id": base + "-0000bbbb", "blocks": dblocks,
                            "kv_transfer_params": params["kv_transfer_params"],
                            "seed": seed + 1 if wrong_seed else seed})
            got = event("decode", "received")
            freed = event("prefill", "freed")
            if wrong_seed:
                if got["match"]:
                    failures.append("%s: a wrong seed matched" % base)
                continue
            if not got["match"] or got["sha256"] != params["sha256"]:
                failures.append("%s: bytes differ" % base)
            if freed["blocks"] != pblocks:
                failures.append("%s: freed %s, not %s" % (base, freed["blocks"], pblocks))
            if got["handshakes"] != 1:
                failures.append("%s: decode made %d handshakes" % (base, got["handshakes"]))
    finally:
        for m in procs:
            try:
                send(m, {"stop": True})
            except (BrokenPipeError, OSError):
                pass
        for m, proc in procs.items():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                failures.append("%s did not stop" % m)
    if failures:
        print("FAIL:", "; ".join(failures))
        sys.exit(1)
    print("PASS: %d requests over one handshake, %s, every byte verified"
          % (args.requests, args.connector))


if __name__ == "__main__":
    main()
