"""The mixed pair of docs/vllm.md, run: the reference engine in vLLM's protocol
(examples/engine -protocol vllm, built with -tags nixl) and vLLM's own connector
(worker.py: vLLM 0.34.0's NixlConnector or NixlPushConnector on CPU tensors),
over NIXL's UCX backend on 127.0.0.1, in both directions.

  python testdata/vllm/mixed_pair.py --engine BIN [--connector pull|push] [--requests 5]

Run it with the oracle's Python (.ci/vllm-oracle), from the repository root,
with NIXL's environment (docs/vllm.md, "Pairing with vLLM's own connector":
gonixl's NIXL on a UCX the wheel's UCX speaks). For each direction it starts
vLLM's side and the engine with the same model facts, sends --requests
requests through them as a proxy would (the prefill leg's kv_transfer_params
handed to the decode leg) and checks: every request answered 200 by the
engine, every transfer done on vLLM's side, one handshake, the engine's
/metrics counting each transfer and no failure. The bytes are the two
engines' own (vLLM's pattern, the engine's fill of docs/kvfill.md), so the
engine's own KV check reports them as other than its fill; the Go tests in
examples/vllmpeer check every byte. Exits 0 only when every check held.
"""

import argparse
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
GEOMETRY = {"layers": 2, "kv_heads": 2, "head_size": 64, "block_size": 32, "num_blocks": 64}
TOKENS = 96  # three blocks of 32


def free_port():
    """A port free now below the kernel's ephemeral range, so no outgoing
    connection takes it as its source port before the child binds it (as
    internal/portpick does for the Go tests)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            high = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        high = 32768
    if high - 10000 < 1000:
        high = 0
    for _ in range(200):
        port = random.randrange(10000, high) if high else 0
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise SystemExit("no free port below %d" % high)


class Lines:
    """A process whose stdout lines are JSON events."""

    def __init__(self, name, argv, timeout):
        self.name, self.timeout = name, timeout
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, bufsize=1)
        self.err = []
        threading.Thread(target=lambda: self.err.extend(self.proc.stderr), daemon=True).start()

    def event(self, want):
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            box = []
            t = threading.Thread(target=lambda: box.append(self.proc.stdout.readline()), daemon=True)
            t.start()
            t.join(max(0.0, deadline - time.monotonic()))
            if not box or not box[0]:
                break
            try:
                e = json.loads(box[0])
            except ValueError:
                continue
            if e.get("event") == want:
                return e
            if e.get("event") == "error":
                raise SystemExit("%s: %s" % (self.name, e))
        raise SystemExit("%s: no %s event; stderr:\n%s" % (self.name, want, "".join(self.err[-40:])))

    def send(self, obj):
        self.proc.stdin.write(json.dumps(obj) + "\n")
        self.proc.stdin.flush()

    def stop(self):
        try:
            self.send({"stop": True})
            self.proc.stdin.close()
        except (BrokenPipeError, OSError, ValueError):
            pass
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def http(method, url, body=None, timeout=120, request_id=None):
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"}
    if request_id:
        # The engine's request id is this plus "-" and 8 hex digits, as
        # vLLM's are: push matches the two legs by the id less that suffix.
        headers["X-Request-Id"] = request_id
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def start_engine(args, role, model, side_port):
    port = free_port()
    g = GEOMETRY
    argv = [args.engine, "-role", role, "-connector", args.connector, "-protocol", "vllm",
            "-vllm-version", "0.34.0", "-vllm-model", model, "-attn-backend", "CPU_ATTN",
            "-model", "qwen2.5-7b", "-served-model-name", "tiny", "-layers", str(g["layers"]),
            "-kv-heads", str(g["kv_heads"]), "-head-dim", str(g["head_size"]),
            "-block-size", str(g["block_size"]), "-tensor-parallel-size", "1",
            "-num-blocks", str(g["num_blocks"]), "-port", str(port),
            "-side-channel-host", "127.0.0.1", "-side-channel-port", str(side_port),
            "-agent", "nixl", "-no-compute", "-log-level", "warn"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    err = []
    threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True).start()
    url = "http://127.0.0.1:%d" % port
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit("engine (%s) exited: %s" % (role, "".join(err[-40:])))
        try:
            if http("GET", url + "/health", timeout=2)[0] == 200:
                return proc, url, err
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit("engine (%s) did not answer /health" % role)


def metric(url, suffix):
    """The sum of every series whose name ends in suffix (the engine may
    name its connector metrics gonixl_... or vLLM's vllm:...)."""
    _, text = http("GET", url + "/metrics")
    total = 0.0
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name.endswith(suffix):
            total += float(line.rsplit(" ", 1)[1])
    return total


def vllm(args, mode, engine_id):
    g = GEOMETRY
    return Lines("vLLM " + mode, [sys.executable, os.path.join(HERE, "worker.py"), mode,
                                  "--connector", args.connector, "--port", str(free_port()),
                                  "--engine-id", engine_id, "--layers", str(g["layers"]),
                                  "--kv-heads", str(g["kv_heads"]), "--head-size", str(g["head_size"]),
                                  "--block-size", str(g["block_size"]), "--num-blocks", str(g["num_blocks"])],
                 args.timeout)


def vllm_prefill_engine_decode(args, failures):
    v = vllm(args, "prefill", "vllm-prefill")
    proc = None
    try:
        ready = v.event("ready")
        proc, url, err = start_engine(args, "decode", ready["model"], free_port())
        for n in range(args.requests):
            v.send({"request_id": "req-%d-0000aaaa" % n, "blocks": [1 + 3 * n + i for i in range(3)],
                    "num_tokens": TOKENS, "seed": n})
            kv = v.event("params")["kv_transfer_params"]
            if args.connector == "push":
                kv = dict(kv, do_remote_prefill=True)
            status, body = http("POST", url + "/v1/completions", {
                "model": "tiny", "prompt": list(range(1, TOKENS + 1)), "max_tokens": 2,
                "kv_transfer_params": kv}, timeout=120, request_id="req-%d" % n)
            if status != 200:
                failures.append("vLLM prefill -> engine decode, request %d: HTTP %d %s" % (n, status, body[:400]))
                continue
            v.event("freed")
        transfers = metric(url, "nixl_xfer_time_seconds_count")
        failed = metric(url, "nixl_num_failed_transfers_total")
        if args.connector == "pull" and transfers < args.requests:
            failures.append("vLLM prefill -> engine decode: the engine counted %d transfers, want %d" % (transfers, args.requests))
        if failed:
            failures.append("vLLM prefill -> engine decode: the engine counted %d failed transfers" % failed)
        print("vLLM prefill -> engine decode (%s): %d requests answered 200, engine metrics: %d transfers, %d failed"
              % (args.connector, args.requests, transfers, failed), flush=True)
    finally:
        v.stop()
        if proc:
            proc.terminate()
            proc.wait(timeout=60)


def engine_prefill_vllm_decode(args, failures):
    v = vllm(args, "decode", "vllm-decode")
    proc = None
    try:
        ready = v.event("ready")
        proc, url, err = start_engine(args, "prefill", ready["model"], free_port())
        for n in range(args.requests):
            kv = {"do_remote_decode": True}
            status, body = http("POST", url + "/v1/completions", {
                "model": "tiny", "prompt": list(range(1, TOKENS + 1)), "max_tokens": 1,
                "kv_transfer_params": kv}, timeout=120, request_id="dreq-%d" % n)
            if status != 200:
                failures.append("engine prefill, request %d: HTTP %d %s" % (n, status, body[:400]))
                continue
            params = json.loads(body)["kv_transfer_params"]
            v.send({"request_id": "dreq-%d-0000bbbb" % n, "blocks": [60 - 3 * n - i for i in range(3)],
                    "num_tokens": TOKENS, "kv_transfer_params": params})
            got = v.event("received")
            if got.get("handshakes") != 1:
                failures.append("engine prefill -> vLLM decode, request %d: %s handshakes" % (n, got.get("handshakes")))
        print("engine prefill -> vLLM decode (%s): %d requests received by vLLM over one handshake"
              % (args.connector, args.requests), flush=True)
    finally:
        v.stop()
        if proc:
            proc.terminate()
            proc.wait(timeout=60)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--engine", required=True, help="examples/engine built with -tags nixl")
    p.add_argument("--connector", choices=["pull", "push"], default="pull")
    p.add_argument("--requests", type=int, default=5)
    p.add_argument("--timeout", type=float, default=300.0, help="seconds any one wait may take")
    args = p.parse_args()
    os.environ.setdefault("UCX_NET_DEVICES", "lo")
    failures = []
    vllm_prefill_engine_decode(args, failures)
    engine_prefill_vllm_decode(args, failures)
    if failures:
        print("FAIL:", "; ".join(failures))
        sys.exit(1)
    print("PASS: the mixed pair, %s, both directions" % args.connector)


if __name__ == "__main__":
    main()
