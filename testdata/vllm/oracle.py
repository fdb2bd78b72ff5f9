"""vLLM's own connector code as the oracle of gonixl's tests.

Run with the Python of the environment .ci/vllm-oracle installs (the vLLM
release users run, from PyPI). Every answer here is computed by vLLM's code:
its compatibility hash, its msgspec wire types, its side-channel listener and
handshake client, its PUSH_REG builder and parser, its request-id rule. Where a
vLLM function is a method, it runs unbound on a small stand-in for the object,
holding only the attributes that method reads; the stand-ins say which.

Commands (one per process; answers are JSON lines on stdout):
  info                      vLLM's version and NIXL_CONNECTOR_VERSION
  hash                      stdin: JSON factors per line ->
                            compute_nixl_compatibility_hash
  decode                    stdin: hex NixlHandshakePayload per line -> decoded
                            and re-encoded as vLLM's handshake client does
  listen PORT PP:TP=HEX...  vLLM's handshake listener serving these payloads,
                            until stdin closes ("READY" once it listens)
  handshake                 stdin: JSON {host, port, engine_id, hash, tp_size}
                            per line -> vLLM's handshake client against
                            that side channel
  pushreg                   stdin: JSON -> the PUSH_REG notification vLLM's
                            push decode sends for that allocation
  pushreg-parse             stdin: hex notification -> what vLLM's push
                            prefill stores from it
  base-id ID...             vLLM's get_base_request_id of each id
  pull-params               stdin: JSON request -> the kv_transfer_params a
                            vLLM pull prefill returns when it finishes
  metrics-line              stdin: JSON interval per line -> the "KV Transfer metrics"
                            line vLLM logs for it (NixlKVConnectorStats.reduce,
                            joined as KVConnectorLogging.log joins it)
  recv-meta                 stdin: JSON {request_id, local_block_ids, params}
                            per line -> the ReqMeta a vLLM decode builds
                            from those kv_transfer_params
"""

import json
import os
import sys
import threading
import types

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

import msgspec  # noqa: E402

import vllm  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.v1.nixl import (  # noqa: E402
    metadata as nixl_meta,
)


def out(obj):
    sys.stdout.write(json.dumps(obj, sort_keys=True) + "\n")
    sys.stdout.flush()


def metadata_fields(m):
    d = {}
    for f in m.__dataclass_fields__:
        v = getattr(m, f)
        if isinstance(v, bytes):
            v = v.hex()
        elif isinstance(v, tuple):
            v = list(v)
        d[f] = v
    return d


def cmd_info(_args):
    out({"vllm_version": vllm.__version__, "connector_version": nixl_meta.NIXL_CONNECTOR_VERSION})


def cmd_hash(_args):
    for line in sys.stdin:
        if line.strip():
            hash_one(json.loads(line))


def hash_one(f):
    if "connector_version" in f:
        # The hash reads the module's constant when it runs: an older
        # connector version is hashed by the same code.
        nixl_meta.NIXL_CONNECTOR_VERSION = f["connector_version"]
    if "vllm_version" in f:
        vllm.__version__ = f["vllm_version"]
    # compute_nixl_compatibility_hash reads these attributes of VllmConfig.
    model = types.SimpleNamespace(
        model=f["model"],
        dtype=f["dtype"],
        get_total_num_kv_heads=lambda: f["num_kv_heads"],
        get_head_size=lambda: f["head_size"],
        get_total_num_hidden_layers=lambda: f["num_hidden_layers"],
    )
    cfg = types.SimpleNamespace(
        model_config=model,
        cache_config=types.SimpleNamespace(cache_dtype=f["cache_dtype"]),
        scheduler_config=types.SimpleNamespace(
            disable_hybrid_kv_cache_manager=not f["is_hma_enabled"]
        ),
        speculative_config=None,
    )
    h = nixl_meta.compute_nixl_compatibility_hash(
        cfg, f["attn_backend_name"], f["transfer_mode"]
    )
    out({"hash": h, "vllm_version": vllm.__version__,
         "connector_version": nixl_meta.NIXL_CONNECTOR_VERSION})


def cmd_decode(_args):
    enc = msgspec.msgpack.Encoder()
    for line in sys.stdin:
        raw = bytes.fromhex(line.strip())
        try:
            p = msgspec.msgpack.Decoder(nixl_meta.NixlHandshakePayload).decode(raw)
            m = msgspec.msgpack.Decoder(nixl_meta.NixlAgentMetadata).decode(
                p.agent_metadata_bytes
            )
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            out({"error": str(e)})
            continue
        out({
            "hash": p.compatibility_hash,
            "metadata": metadata_fields(m),
            "metadata_reencoded": enc.encode(m).hex(),
            "payload_reencoded": enc.encode(p).hex(),
        })


def cmd_listen(args):
    from vllm.distributed.kv_transfer.kv_connector.v1.nixl.base_scheduler import (
        NixlBaseConnectorScheduler,
    )

    port = int(args[0])
    data = {}
    for a in args[1:]:
        ranks, payload = a.split("=", 1)
        pp, tp = ranks.split(":")
        data[(int(pp), int(tp))] = bytes.fromhex(payload)
    ready, stop = threading.Event(), threading.Event()
    t = threading.Thread(
        target=NixlBaseConnectorScheduler._nixl_handshake_listener,
        args=(data, ready, stop, "127.0.0.1", port),
        daemon=True,
    )
    t.start()
    ready.wait()
    print("READY", flush=True)
    sys.stdin.read()
    stop.set()
    t.join(timeout=5)


def cmd_handshake(_args):
    for line in sys.stdin:
        if line.strip():
            a = json.loads(line)
            handshake_one(a["host"], a["port"], a["engine_id"], a["hash"], a["tp_size"])


def handshake_one(host, port, engine_id, compat_hash, tp):
    from vllm.distributed.kv_transfer.kv_connector.v1.nixl.base_worker import (
        NixlBaseConnectorWorker,
    )

    loaded = []

    # _nixl_handshake reads these attributes; add_remote_agent (which
    # loads the agent and checks the layout against a real KV cache) is
    # replaced by a recorder.
    def add_remote_agent(metadata, remote_rank, remote_tp_size, dcp_size=1):
        loaded.append({"rank": remote_rank, "metadata": metadata_fields(metadata)})
        return "agent-%d" % remote_rank

    w = types.SimpleNamespace(
        _is_csa_linear=False,
        use_host_buffer=True,
        transfer_topo=types.SimpleNamespace(
            handshake_target_ranks=lambda remote_tp, remote_dcp: list(range(remote_tp))
        ),
        compat_hash=compat_hash,
        enforce_compat_hash=True,
        pcp_size=1,
        dcp_size=1,
        add_remote_agent=add_remote_agent,
    )
    w._validate_remote_parallel_config = types.MethodType(
        NixlBaseConnectorWorker._validate_remote_parallel_config, w
    )
    try:
        agents, offset = NixlBaseConnectorWorker._nixl_handshake(w, host, port, tp, engine_id)
    except Exception as e:  # vLLM raises RuntimeError with its message
        out({"error": "%s: %s" % (type(e).__name__, e)})
        return
    out({"agents": {"%d:%d" % k: v for k, v in agents.items()}, "offset": offset,
         "loaded": loaded})


def cmd_pushreg(_args):
    from vllm.distributed.kv_transfer.kv_connector.v1.nixl.push_scheduler import (
        NixlPushConnectorScheduler,
    )
    from vllm.distributed.kv_transfer.kv_connector.v1.nixl.push_worker import (
        NixlPushConnectorWorker,
    )

    f = json.load(sys.stdin)
    # update_state_after_alloc reads these scheduler attributes; the
    # block-id clip is the identity for one full-attention group.
    sched = types.SimpleNamespace(
        use_host_buffer=False,
        _reqs_in_batch=set(),
        get_exchange_clipped_blocks=lambda b: b,
        engine_id=f["engine_id"],
        side_channel_host=f["host"],
        side_channel_port=f["port"],
        vllm_config=types.SimpleNamespace(
            parallel_config=types.SimpleNamespace(tensor_parallel_size=f["tp_size"])
        ),
        _push_pending_registrations={},
        _push_registration_deadlines={},
        _push_registration_timeout=480.0,
        _reqs_need_recv={},
    )
    req = types.SimpleNamespace(
        request_id=f["request_id"], kv_transfer_params=dict(f["params"]),
        prompt_token_ids=list(range(f.get("num_tokens", 16))),
    )
    blocks = types.SimpleNamespace(
        get_unhashed_block_ids_all_groups=lambda: tuple(list(g) for g in f["blocks"])
    )
    NixlPushConnectorScheduler.update_state_after_alloc(
        sched, req, blocks, f.get("num_external_tokens", 16)
    )
    reg = sched._push_pending_registrations[f["request_id"]]
    sent = []
    # _do_send_reg_notif reads these worker attributes.
    worker = types.SimpleNamespace(
        _handshake_lock=threading.Lock(),
        _remote_agents={reg["remote_engine_id"]: {(0, 0): "prefill-agent"}},
        nixl_wrapper=types.SimpleNamespace(
            send_notif=lambda agent, notif_msg: sent.append((agent, notif_msg))
        ),
    )
    NixlPushConnectorWorker._do_send_reg_notif(worker, f["request_id"], reg)
    out({"notifs": [m.hex() for _, m in sent],
         "params_after": {k: list(v) if isinstance(v, tuple) else v
                          for k, v in req.kv_transfer_params.items()}})


def cmd_pushreg_parse(_args):
    from vllm.distributed.kv_transfer.kv_connector.v1.nixl.push_worker import (
        NixlPushConnectorWorker,
    )

    for line in sys.stdin:
        notif = bytes.fromhex(line.strip())
        # _handle_push_reg_notif reads these worker attributes; with no
        # finished request it stores the registration as pending.
        w = types.SimpleNamespace(_pending_d_registrations={}, _push_finished_blocks={})
        w._pop_matching_finished_blocks = types.MethodType(
            NixlPushConnectorWorker._pop_matching_finished_blocks, w
        )
        NixlPushConnectorWorker._handle_push_reg_notif(w, notif)
        out({"pending": w._pending_d_registrations})


def cmd_base_id(args):
    from vllm.distributed.kv_transfer.kv_connector.v1.nixl.utils import (
        get_base_request_id,
    )

    if args and args[0] == "--":
        args = args[1:]
    out({a: get_base_request_id(a) for a in args})


def cmd_pull_params(_args):
    from vllm.distributed.kv_transfer.kv_connector.v1.nixl.pull_scheduler import (
        NixlPullConnectorScheduler,
    )
    from vllm.v1.request import RequestStatus

    f = json.load(sys.stdin)
    # request_finished reads these scheduler attributes; the heartbeat
    # stop and the block-id clip (the identity for one full-attention
    # group) are stand-ins.
    sched = types.SimpleNamespace(
        _stop_heartbeat=lambda req_id: None,
        is_bidirectional_kv_xfer_enabled=False,
        _reqs_need_recv={},
        _reqs_not_processed=set(),
        _reqs_need_save={},
        _reqs_need_send={},
        _kv_lease_duration=f.get("lease", 30),
        decoder_kv_blocks_ttl=480,
        get_exchange_clipped_blocks=lambda b: b,
        engine_id=f["engine_id"],
        side_channel_host=f["host"],
        side_channel_port=f["port"],
        transfer_tp_size=f["tp_size"],
        vllm_config=types.SimpleNamespace(parallel_config=types.SimpleNamespace(
            decode_context_parallel_size=1, pipeline_parallel_size=1)),
        _registration_generation=f.get("registration_generation", 0),
        _TRANSFER_MODE=NixlPullConnectorScheduler._TRANSFER_MODE,
    )
    req = types.SimpleNamespace(
        request_id=f["request_id"], status=RequestStatus.FINISHED_LENGTH_CAPPED,
        kv_transfer_params={"do_remote_decode": True},
        num_computed_tokens=f["num_tokens"],
    )
    delay, params = NixlPullConnectorScheduler.request_finished(
        sched, req, tuple(list(g) for g in f["blocks"])
    )
    params = {k: [list(g) for g in v] if k == "remote_block_ids" else v
              for k, v in params.items()}
    out({"delay_free": delay, "params": params})


def cmd_recv_meta(_args):
    for line in sys.stdin:
        if not line.strip():
            continue
        f = json.loads(line)
        md = nixl_meta.NixlConnectorMetadata()
        try:
            md.add_new_req_to_recv(f["request_id"], f["local_block_ids"], f["params"])
        except Exception as e:
            out({"error": "%s: %s" % (type(e).__name__, e)})
            continue
        r = md.reqs_to_recv[f["request_id"]]
        out({"tp_size": r.tp_size, "pp_size": r.pp_size, "dcp_size": r.dcp_size,
             "remote_block_size": r.remote_block_size,
             "remote": {
                 "block_ids": r.remote.block_ids, "engine_id": r.remote.engine_id,
                 "request_id": r.remote.request_id, "host": r.remote.host,
                 "port": r.remote.port, "blocks_expiry_time": r.remote.blocks_expiry_time,
                 "num_tokens": r.remote.num_tokens,
                 "registration_generation": getattr(r.remote, "registration_generation", None),
             }})


def cmd_metrics_line(_args):
    from vllm.distributed.kv_transfer.kv_connector.v1.nixl.stats import (
        NixlKVConnectorStats,
    )

    for line in sys.stdin:
        if line.strip():
            metrics_line_one(NixlKVConnectorStats(), json.loads(line))


def metrics_line_one(st, f):
    for x in f.get("transfers") or []:
        # record_transfer reads these attributes of NIXL's telemetry
        # (durations in microseconds).
        st.record_transfer(types.SimpleNamespace(xferDuration=x["xfer_us"], postDuration=x["post_us"],
                                                 totalBytes=x["bytes"], descCount=x["descs"]))
    for name, record in (("failed_transfers", st.record_failed_transfer),
                         ("failed_notifications", st.record_failed_notification),
                         ("failed_handshakes", st.record_failed_handshake),
                         ("expired", st.record_kv_expired_req),
                         ("after_expiry", st.record_notification_after_expiry)):
        for _ in range(f.get(name, 0)):
            record()
    # metrics.py's KVConnectorLogging.log joins reduce()'s items this way.
    line = ", ".join(f"{k}={v}" for k, v in st.reduce().items())
    out({"line": "KV Transfer metrics: " + line, "empty": st.is_empty()})


COMMANDS = {
    "metrics-line": cmd_metrics_line,
    "pull-params": cmd_pull_params,
    "recv-meta": cmd_recv_meta,
    "info": cmd_info,
    "hash": cmd_hash,
    "decode": cmd_decode,
    "listen": cmd_listen,
    "handshake": cmd_handshake,
    "pushreg": cmd_pushreg,
    "pushreg-parse": cmd_pushreg_parse,
    "base-id": cmd_base_id,
}

if __name__ == "__main__":
    COMMANDS[sys.argv[1]](sys.argv[2:])
