"""One side of a prefill/decode pair run by vLLM's own NIXL connector, on CPU.

Run with the Python of the environment .ci/vllm-oracle installs (vLLM from
PyPI plus NIXL's Python package). This process is a vLLM engine in all that
touches KV transfer: vLLM builds the config, the attention layers, the KV
cache plan and the KV cache tensors, and the connector (NixlConnector = pull,
NixlPushConnector = push) runs as vLLM's engine runs it, scheduler side and
worker side, with its side-channel listener and NIXL UCX agent. Only the
model forward is a stand-in (see "Stand-ins" below).

Modes (one per process; events are JSON lines on stdout, logs on stderr):

  prefill  Serves KV. Reads requests from stdin, one JSON object a line:
             {"request_id": "r1", "blocks": [1, 2], "num_tokens": 64, "seed": 7}
           fills those blocks with the pattern of that seed (the stand-in for
           the forward that writes KV), finishes the request as vLLM's
           scheduler does and prints
             {"event": "params", "request_id": ..., "kv_transfer_params": {...},
              "sha256": ...}
           It keeps stepping the engine; when the connector reports the
           request's blocks free (the decoder read them, or the lease ran
           out) it prints {"event": "freed", "request_id", "blocks", "t"}.
           {"stop": true} or end of stdin stops it.
  decode   Pulls KV. Reads from stdin, one JSON object a line:
             {"request_id": "d1", "kv_transfer_params": {...},
              "blocks": [5, 6], "seed": 7}
           ("seed" optional: with it the bytes are compared with the
           pattern), runs the connector until the request's KV has arrived and
           prints {"event": "received", "request_id", "sha256", "match",
           "blocks"} (or {"event": "failed", ...}). --dump DIR writes the
           received bytes of each request to DIR/<request_id>.bin.

Both print {"event": "ready", ...} once the side channel listens, with the
geometry vLLM chose (backend, kv_cache_layout, block_lens, ...).

Pattern (so another engine can fill or check the same bytes): byte k of
layer l's page of the request's i-th block (i counts the request's blocks
from 0, whatever their ids) is, in uint32 arithmetic,
    x = seed*0x9E3779B1 + l*0x85EBCA6B + i*0xC2B2AE35 + k*0x27D4EB2F
    x ^= x >> 15; x *= 0x2C1B3C6D; x ^= x >> 12; byte = x >> 24
The checksum is SHA-256 over the pages in order layer 0 block 0, layer 0
block 1, ..., layer 1 block 0, ...

Stand-ins (the narrowest found; everything else is vLLM's code):
  * vllm.triton_utils.HAS_TRITON is set True before VllmConfig is built:
    vLLM's CPU platform refuses x86 without triton-cpu, which only picks the
    model runner; nothing here runs a Triton kernel.
  * The model forward: the pattern is written into the request's blocks
    between the worker connector's pre_forward and post_forward, where the
    attention layers would write KV.
  * vLLM's Scheduler/KVCacheManager: this driver calls the connector's
    scheduler methods in the order the scheduler does, with the blocks given
    on stdin wrapped in vLLM's KVCacheBlocks instead of blocks the manager
    chose.
  * The CPU worker pins the process to the last core of each NUMA node
    (vLLM reserves it for KV transfer); the driver restores the previous
    affinity so that two engines on a small machine don't share one core.
"""

import argparse
import hashlib
import json
import os
import queue
import socket
import sys
import threading
import time


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("mode", choices=["prefill", "decode"])
    p.add_argument("--connector", choices=["pull", "push"], default="pull")
    p.add_argument("--port", type=int, required=True, help="side-channel port")
    p.add_argument("--engine-id", required=True)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--head-size", type=int, default=64)
    p.add_argument("--block-size", type=int, default=32)
    p.add_argument("--num-blocks", type=int, default=64)
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--model-dir", default=None,
                   help="where the tiny model's config.json goes; its path is "
                        "a factor of vLLM's compatibility hash, so both sides "
                        "must use the same (default: derived from geometry)")
    p.add_argument("--lease", type=int, default=30, help="kv_lease_duration, seconds")
    p.add_argument("--dump", default=None, help="decode: write received bytes here")
    p.add_argument("--timeout", type=float, default=60.0,
                   help="decode: seconds to wait for one request's KV")
    return p.parse_args(argv)


_events = None


def claim_stdout():
    """Keep fd 1 for events: NIXL and UCX log to stdout, so everything else
    that writes there goes to stderr."""
    global _events
    sys.stdout.flush()
    _events = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)


def emit(obj):
    _events.write(json.dumps(obj, sort_keys=True) + "\n")
    _events.flush()


def log(msg):
    sys.stderr.write("worker: %s\n" % msg)
    sys.stderr.flush()


def write_model(args):
    d = args.model_dir or os.path.join(
        "/tmp", "gonixl-vllm-worker",
        "tiny-llama-L%d-KV%d-D%d" % (args.layers, args.kv_heads, args.head_size))
    os.makedirs(d, exist_ok=True)
    heads = args.kv_heads * 2
    cfg = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": heads * args.head_size, "head_dim": args.head_size,
        "intermediate_size": 2 * heads * args.head_size,
        "num_attention_heads": heads, "num_key_value_heads": args.kv_heads,
        "num_hidden_layers": args.layers, "vocab_size": 1024,
        "max_position_embeddings": 1 << 20, "rms_norm_eps": 1e-5,
        "torch_dtype": args.dtype, "tie_word_embeddings": False,
    }
    path = os.path.join(d, "config.json")
    tmp = path + ".%d" % os.getpid()
    with open(tmp, "w") as f:
        json.dump(cfg, f, sort_keys=True)
    os.replace(tmp, path)
    return d, heads


def pattern(seed, layer, index, n):
    import numpy as np
    k = np.arange(n, dtype=np.uint32)
    with np.errstate(over="ignore"):
        x = (np.uint32((seed * 0x9E3779B1 + layer * 0x85EBCA6B + index * 0xC2B2AE35) & 0xFFFFFFFF)
             + k * np.uint32(0x27D4EB2F))
        x ^= x >> np.uint32(15)
        x *= np.uint32(0x2C1B3C6D)
        x ^= x >> np.uint32(12)
    return (x >> np.uint32(24)).astype(np.uint8)


class Engine:
    """vLLM's connector, scheduler side and worker side, in one process."""

    def __init__(self, args):
        self.args = args
        os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("UCX_NET_DEVICES", "lo")
        os.environ["VLLM_NIXL_SIDE_CHANNEL_HOST"] = "127.0.0.1"
        os.environ["VLLM_NIXL_SIDE_CHANNEL_PORT"] = str(args.port)
        model_dir, heads = write_model(args)

        import torch
        import vllm.triton_utils
        from vllm.config import (CacheConfig, DeviceConfig, KVTransferConfig, LoadConfig,
                                 ModelConfig, VllmConfig, set_current_vllm_config)
        from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
        from vllm.distributed.kv_transfer.kv_connector.utils import get_current_attn_backends
        from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
        from vllm.distributed.kv_transfer.kv_transfer_state import (
            ensure_kv_transfer_initialized, get_kv_transfer_group)
        from vllm.distributed.parallel_state import (
            ensure_model_parallel_initialized, init_distributed_environment)
        from vllm.model_executor.layers.attention import Attention
        from vllm.v1.attention.backends.utils import (get_supported_kv_cache_layouts,
                                                      resolve_kv_cache_layout)
        from vllm.v1.core.kv_cache_planning import (get_global_kv_cache_groups,
                                                    get_kv_cache_configs)
        from vllm.v1.core.kv_cache_utils import generate_scheduler_kv_cache_config
        from vllm.v1.worker.cpu.attn_utils import get_kv_cache_spec, init_attn_backend
        from vllm.v1.worker.cpu.kv_connector import ActiveKVConnector
        from vllm.v1.worker.utils import allocate_kv_cache

        # Stand-in: see the module docstring.
        vllm.triton_utils.HAS_TRITON = True

        connector = "NixlConnector" if args.connector == "pull" else "NixlPushConnector"
        kvt = KVTransferConfig(
            kv_connector=connector, kv_role="kv_both", kv_buffer_device="cpu",
            engine_id=args.engine_id,
            kv_connector_extra_config={"kv_lease_duration": args.lease},
        )
        vc = VllmConfig(
            model_config=ModelConfig(model=model_dir, skip_tokenizer_init=True,
                                     dtype=args.dtype,
                                     max_model_len=max(1, args.num_blocks - 1) * args.block_size),
            cache_config=CacheConfig(block_size=args.block_size,
                                     num_gpu_blocks_override=args.num_blocks),
            kv_transfer_config=kvt,
            load_config=LoadConfig(load_format="dummy"),
            device_config=DeviceConfig(device="cpu"),
        )
        self.vc = vc
        with set_current_vllm_config(vc):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            dist_port = s.getsockname()[1]
            s.close()
            init_distributed_environment(
                world_size=1, rank=0, local_rank=0, backend="gloo",
                distributed_init_method="tcp://127.0.0.1:%d" % dist_port)
            ensure_model_parallel_initialized(1, 1)

            # The model's attention layers, as a Llama's would build them.
            self.layers = ["model.layers.%d.self_attn.attn" % i for i in range(args.layers)]
            self._attn = [
                Attention(num_heads=heads, head_size=args.head_size,
                          scale=args.head_size ** -0.5, num_kv_heads=args.kv_heads,
                          cache_config=vc.cache_config, prefix=name)
                for name in self.layers
            ]

            # What the engine core does in _initialize_kv_caches.
            specs = get_kv_cache_spec(vc)
            backends = get_current_attn_backends(vc)
            layout = resolve_kv_cache_layout(
                vc, [[m.name for m in get_supported_kv_cache_layouts(backends)]],
                list(specs.values()))
            groups = get_global_kv_cache_groups(vc, [specs])
            page = sum(s.page_size_bytes for s in specs.values())
            kcc = get_kv_cache_configs(vc, [specs], [page * (args.num_blocks + 1)], groups)[0]
            kcc.kv_cache_layout = vc.cache_config.kv_cache_layout
            sched_kcc = generate_scheduler_kv_cache_config([kcc])
            if kcc.num_blocks != args.num_blocks:
                raise SystemExit("vLLM planned %d blocks, not %d" % (kcc.num_blocks, args.num_blocks))

            # What the CPU worker does in initialize_from_config.
            _, kernel_block_sizes = init_attn_backend(kcc, vc, torch.device("cpu"))
            self.kv_caches = allocate_kv_cache(kcc, torch.device("cpu"), layout,
                                               kernel_block_sizes)
            affinity = os.sched_getaffinity(0)
            ensure_kv_transfer_initialized(vc, kcc)
            os.sched_setaffinity(0, affinity)  # Stand-in: see the module docstring.
            self.worker = ActiveKVConnector(vc, self.kv_caches)
            self.wconn = get_kv_transfer_group()

            # The engine core's scheduler-side connector, and the handshake
            # metadata it collects from the workers.
            self.sconn = KVConnectorFactory.create_connector(
                config=vc, role=KVConnectorRole.SCHEDULER, kv_cache_config=sched_kcc)
            self.sconn.set_xfer_handshake_metadata_pp_aware(
                {(0, 0): self.wconn.get_handshake_metadata()})

        w = self.wconn.connector_worker
        # Count the handshakes vLLM's worker makes (a wrapper around its own
        # method, which runs unchanged), so a caller can check that one
        # handshake serves many requests.
        self.handshakes = 0
        handshake = w._nixl_handshake

        def counted_handshake(*a, **kw):
            result = handshake(*a, **kw)
            self.handshakes += 1
            return result

        w._nixl_handshake = counted_handshake
        first = self.kv_caches[self.layers[0]]
        self.page_bytes = w.block_len_per_layer[0]
        emit({
            "event": "ready", "mode": args.mode, "connector": connector,
            "engine_id": args.engine_id, "port": args.port,
            "model": vc.model_config.model, "compat_hash": w.compat_hash,
            "attn_backend": w.backend_name, "kv_cache_layout": w.kv_cache_layout,
            "num_blocks": w.num_blocks, "block_size": w.block_size,
            "block_lens": w.block_len_per_layer, "block_strides": w.block_stride_per_layer,
            "region_names": w.region_names, "region_mem_types": w.region_mem_types,
            "use_host_buffer": w.use_host_buffer,
            "region_offsets": [a - w.kv_caches_base_addr[args.engine_id][0][0]
                               for a in w.kv_caches_base_addr[args.engine_id][0]],
            "layer_view_shape": list(first.shape), "layer_view_stride": list(first.stride()),
            "dtype": str(first.dtype).replace("torch.", ""),
        })
        self.finished_since_step = set()

    # ---- bytes -------------------------------------------------------

    def page(self, layer, block):
        import torch
        return self.kv_caches[layer][block].view(torch.uint8).reshape(-1)

    def fill(self, blocks, seed):
        import torch
        for l, name in enumerate(self.layers):
            for i, b in enumerate(blocks):
                self.page(name, b).copy_(torch.from_numpy(pattern(seed, l, i, self.page_bytes)))

    def read(self, blocks):
        return b"".join(self.page(name, b).numpy().tobytes()
                        for name in self.layers for b in blocks)

    def expected(self, n_blocks, seed):
        return b"".join(pattern(seed, l, i, self.page_bytes).tobytes()
                        for l in range(len(self.layers)) for i in range(n_blocks))

    # ---- engine steps ------------------------------------------------

    def new_request(self, request_id, num_tokens, params):
        from vllm.sampling_params import SamplingParams
        from vllm.v1.request import Request
        sp = SamplingParams(max_tokens=1, extra_args={"kv_transfer_params": params})
        req = Request(request_id=request_id, prompt_token_ids=list(range(num_tokens)),
                      sampling_params=sp, pooling_params=None)
        # Scheduler.add_request
        self.sconn.on_new_request(req)
        return req

    def allocate(self, req, blocks):
        """Scheduler.schedule for a waiting request: ask the connector how
        many tokens it loads, then hand it the allocated blocks."""
        from vllm.v1.core.kv_cache_manager import KVCacheBlocks
        from vllm.v1.core.kv_cache_utils import KVCacheBlock
        ext, load_async = self.sconn.get_num_new_matched_tokens(req, 0)
        self.sconn.update_state_after_alloc(
            req, KVCacheBlocks((tuple(KVCacheBlock(b) for b in blocks),)), ext or 0)
        return ext, load_async

    def step(self, forward=None):
        """One engine step: the scheduler builds the connector metadata, the
        worker runs it around the (stand-in) forward, the scheduler takes the
        connector's output."""
        from vllm.v1.core.sched.output import SchedulerOutput
        so = SchedulerOutput.make_empty()
        so.finished_req_ids = self.finished_since_step
        self.finished_since_step = set()
        so.kv_connector_metadata = self.sconn.build_connector_meta(so)
        self.worker.pre_forward(so)
        if forward is not None:
            forward()
        self.worker.finish_forward()
        out = self.worker.post_forward(so.finished_req_ids)
        self.sconn.update_connector_output(out)
        return out

    def finish(self, req, blocks):
        """Scheduler._free_request for a request that stopped at its length."""
        from vllm.v1.request import RequestStatus
        req.status = RequestStatus.FINISHED_LENGTH_CAPPED
        delay, params = self.sconn.request_finished_all_groups(req, (list(blocks),))
        self.finished_since_step.add(req.request_id)
        return delay, params

    def shutdown(self):
        self.wconn.shutdown()
        self.sconn.shutdown()


def stdin_lines(q):
    for line in sys.stdin:
        if line.strip():
            q.put(line)
    q.put(None)


def parse_command(line, required):
    """A stdin command, or None after an error event naming what was wrong."""
    try:
        cmd = json.loads(line)
        if not isinstance(cmd, dict):
            raise ValueError("not a JSON object")
    except ValueError as e:
        emit({"event": "error", "error": "bad command line: %s" % e})
        return None
    if cmd.get("stop"):
        return cmd
    missing = [k for k in required if k not in cmd]
    if missing:
        emit({"event": "error", "error": "command lacks %s" % ", ".join(missing)})
        return None
    return cmd


def json_params(params):
    out = {}
    for k, v in params.items():
        if k == "remote_block_ids":
            v = [list(g) for g in v]
        out[k] = v
    return out


def run_prefill(eng, q):
    held = {}  # request_id -> blocks
    while True:
        try:
            line = q.get(timeout=0.005)
        except queue.Empty:
            line = ""
        if line is None:
            break
        if line:
            cmd = parse_command(line, ("request_id", "blocks", "num_tokens", "seed"))
            if cmd is None:
                continue
            if cmd.get("stop"):
                break
            rid, blocks = cmd["request_id"], list(cmd["blocks"])
            req = eng.new_request(rid, int(cmd["num_tokens"]), {"do_remote_decode": True})
            eng.allocate(req, blocks)
            eng.step(forward=lambda: eng.fill(blocks, int(cmd["seed"])))
            req.num_computed_tokens = req.num_prompt_tokens
            delay, params = eng.finish(req, blocks)
            if delay:
                held[rid] = blocks
            emit({"event": "params", "request_id": rid, "delay_free": delay,
                  "kv_transfer_params": json_params(params),
                  "sha256": hashlib.sha256(eng.read(blocks)).hexdigest()})
            continue
        out = eng.step()
        for rid in sorted(out.finished_sending or ()) if out else ():
            emit({"event": "freed", "request_id": rid, "blocks": held.pop(rid, None),
                  "t": time.monotonic(), "handshakes": eng.handshakes})


def run_decode(eng, q, args):
    while True:
        line = q.get()
        if line is None:
            break
        cmd = parse_command(line, ("request_id", "blocks", "kv_transfer_params"))
        if cmd is None:
            continue
        if cmd.get("stop"):
            break
        rid, blocks = cmd["request_id"], list(cmd["blocks"])
        params = dict(cmd["kv_transfer_params"])
        req = eng.new_request(rid, int(cmd.get("num_tokens") or params["remote_num_tokens"]),
                              params)
        ext, load_async = eng.allocate(req, blocks)
        from vllm.v1.request import RequestStatus
        req.status = RequestStatus.WAITING_FOR_REMOTE_KVS
        deadline = time.monotonic() + args.timeout
        done = failed = False
        invalid = set()
        while not (done or failed):
            if time.monotonic() > deadline:
                failed = True
                break
            out = eng.step()
            if out is None:
                continue
            done = rid in (out.finished_recving or ())
            failed = rid in (out.failed_recving or ())
            invalid |= set(out.invalid_block_ids or ())
            if not done and not failed:
                time.sleep(0.002)
        data = eng.read(blocks)
        if args.dump:
            os.makedirs(args.dump, exist_ok=True)
            with open(os.path.join(args.dump, rid + ".bin"), "wb") as f:
                f.write(data)
        ev = {"event": "received" if done and not invalid else "failed",
              "request_id": rid, "blocks": blocks, "external_tokens": ext,
              "load_async": load_async, "invalid_block_ids": sorted(invalid),
              "sha256": hashlib.sha256(data).hexdigest(),
              "handshakes": eng.handshakes}
        if "seed" in cmd:
            ev["match"] = data == eng.expected(len(blocks), int(cmd["seed"]))
        # The request then runs and ends; a decoder frees its blocks at once.
        req.status = RequestStatus.RUNNING
        req.num_computed_tokens = req.num_prompt_tokens
        eng.finish(req, blocks)
        eng.step()
        emit(ev)


def watch_listener(args):
    """Ends the process when vLLM's handshake listener thread dies.

    The listener binds the side-channel port in its own thread, and the
    connector waits for it to say it listens with no deadline: a bind that
    fails (the port taken meanwhile) would leave this process waiting
    forever. The caller can pick another port on "port_in_use"."""
    previous = threading.excepthook

    def hook(a):
        if a.thread is not None and a.thread.name == "nixl_handshake_listener":
            text = "%s: %s" % (type(a.exc_value).__name__, a.exc_value)
            emit({"event": "failed", "port": args.port, "reason": "side channel listener: " + text,
                  "port_in_use": "Address already in use" in text})
            os._exit(3)
        previous(a)

    threading.excepthook = hook


def main(argv):
    args = parse_args(argv)
    claim_stdout()
    watch_listener(args)
    eng = Engine(args)
    q = queue.Queue()
    threading.Thread(target=stdin_lines, args=(q,), daemon=True).start()
    try:
        if args.mode == "prefill":
            run_prefill(eng, q)
        else:
            run_decode(eng, q, args)
    finally:
        eng.shutdown()
        emit({"event": "stopped"})
    # NIXL's UCX backend can crash in exit-time destructors; everything is
    # flushed and shut down by now.
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
