# Writes testdata/vllm/versions.json: NixlAgentMetadata, NixlHandshakePayload
# and compatibility-hash vectors of NIXL connector versions 13 to 16, made by
# vLLM's own code rather than by hand (gen_vectors.py lays version 12's down
# byte by byte). Run from the repository root with a Python that has vLLM
# 0.34.0 and msgspec installed (the oracle venv, /opt/gonixl-vllm):
#
#   python testdata/vllm/gen_vllm_vectors.py [metadata.py ...] > testdata/vllm/versions.json
#
# The installed vLLM gives version 16. Each extra argument is the
# nixl/metadata.py of an older release, taken from its wheel:
#
#   pip download --no-deps vllm==0.33.0 -d /tmp/w
#   unzip -p /tmp/w/vllm-0.33.0-*.whl \
#     vllm/distributed/kv_transfer/kv_connector/v1/nixl/metadata.py > /tmp/metadata-0.33.0.py
#
# and is loaded as a module of its own, its imports resolved against the
# installed vLLM (they name only config types and logging). The committed
# versions.json was made with 0.31.0's (13), 0.32.0's (14) and 0.33.0's
# (15). For every version the metadata is encoded with
# msgspec.msgpack.Encoder(), as base_worker.py's register_kv_caches does, and
# the hash is compute_nixl_compatibility_hash itself, given a stand-in for
# the few VllmConfig attributes it reads.
import dataclasses
import hashlib
import importlib.util
import json
import sys
import types

import msgspec
import vllm
from vllm.distributed.kv_transfer.kv_connector.v1.nixl import metadata as installed


def load(path):
    spec = importlib.util.spec_from_file_location("nixl_metadata_%d" % abs(hash(path)), path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


LAYERS = ["model.layers.%d.self_attn.attn" % i for i in range(3)]


def cases(mod):
    """The metadata values of one version, as keyword arguments of its
    NixlAgentMetadata; fields the version lacks are dropped."""
    fields = {f.name for f in dataclasses.fields(mod.NixlAgentMetadata)}
    one_region = dict(
        engine_id="e1", agent_metadata=b"\x01\x02", kv_caches_base_addr=[0x7F0000000000],
        device_id=0, num_blocks=1000, block_lens=[65536], block_strides=[65536],
        kv_cache_layout="LBHNC", block_size=16, ssm_sizes=(0, 0), attn_backend_name="FLASH_ATTN",
        physical_blocks_per_logical_kv_block=1)
    # Three layers listed as vLLM sorts them; the last one in group 1, and
    # every optional field set.
    paired = dict(
        engine_id="prefill-engine-0123456789abcdef-x", agent_metadata=bytes(range(256)) + b"\x00" * 44,
        kv_caches_base_addr=[0x3000, 0x1000, 0xFFFFFFFFFFFFFF00], device_id=7, num_blocks=70000,
        block_lens=[30, 10, 32768], block_strides=[30, 10, 32768], kv_cache_layout="LBNHC", block_size=128,
        ssm_sizes=(12288, 1048576), attn_backend_name="FLASHINFER", physical_blocks_per_logical_kv_block=4,
        region_num_blocks=[70000, 70000, 16384], region_group_ids=[1, 0, -1],
        region_names=[LAYERS[2], LAYERS[0], LAYERS[1]], region_mem_types=["VRAM", "VRAM", "DRAM"],
        dcp_size=2, pcp_size=1, ple_block_len=1 << 33,
        region_members=[[LAYERS[2]], [LAYERS[0]], [LAYERS[1], "model.layers.1.linear_attn"]],
        layer_group_ids={LAYERS[2]: 1, LAYERS[0]: 0, LAYERS[1]: 0, "model.layers.1.linear_attn": 127},
        packed_member_layouts={LAYERS[1]: (0, 16384), "model.layers.1.linear_attn": (16384, 16384)})
    # What gonixl publishes for a rank of a two-layer packed model (the Go
    # test builds the same rank and compares PublishRank's bytes).
    gonixl = dict(
        engine_id="prefill", agent_metadata=b"\x00", kv_caches_base_addr=[0x10000, 0x10800],
        device_id=0, num_blocks=4, block_lens=[512, 512], block_strides=[512, 512],
        kv_cache_layout="LBHNC", block_size=16, ssm_sizes=(0, 0), attn_backend_name="FLASH_ATTN",
        physical_blocks_per_logical_kv_block=1, region_num_blocks=[4, 4], region_group_ids=[0, 0],
        region_names=None, region_mem_types=["VRAM", "VRAM"], dcp_size=1, pcp_size=1,
        region_members=[[LAYERS[0]], [LAYERS[1]]],
        layer_group_ids={LAYERS[0]: 0, LAYERS[1]: 0})
    out = []
    for name, kw in (("one_region_defaults", one_region), ("three_regions_every_field", paired), ("gonixl_two_layers", gonixl)):
        out.append((name, mod.NixlAgentMetadata(**{k: v for k, v in kw.items() if k in fields})))
    return out


def as_json(md):
    v = {}
    for f in dataclasses.fields(md):
        x = getattr(md, f.name)
        if isinstance(x, bytes):
            x = x.hex()
        elif isinstance(x, tuple):
            x = list(x)
        elif f.name == "layer_group_ids":
            x = [[k, g] for k, g in x.items()]
        elif f.name == "packed_member_layouts":
            x = [[k, o, n] for k, (o, n) in x.items()]
        v[f.name] = x
    return v


class Stand:
    """The attributes of VllmConfig that compute_nixl_compatibility_hash
    reads."""

    def __init__(self, spec=None, hma=True):
        self.model_config = types.SimpleNamespace(
            model="Qwen/Qwen3-0.6B", dtype="torch.bfloat16",
            get_total_num_kv_heads=lambda: 8, get_head_size=lambda: 128,
            get_total_num_hidden_layers=lambda: 28)
        self.cache_config = types.SimpleNamespace(cache_dtype="auto")
        self.scheduler_config = types.SimpleNamespace(disable_hybrid_kv_cache_manager=not hma)
        self.speculative_config = spec


def eagle3():
    draft = types.SimpleNamespace(model="org/draft", revision=None, code_revision=None,
                                  hf_config=types.SimpleNamespace(eagle_aux_hidden_state_layer_ids=[1, 13, 24]))
    return types.SimpleNamespace(method="eagle3", draft_model_config=draft, parallel_drafting=True,
                                 kv_cache_dtype=None, uses_target_hidden_states=True, use_eagle=lambda: True)


def factors(version, mode, hma, spec):
    f = {"vllm_version": vllm.__version__, "nixl_connector_version": version, "model": "Qwen/Qwen3-0.6B",
         "dtype": "torch.bfloat16", "num_kv_heads": 8, "head_size": 128, "num_hidden_layers": 28,
         "attn_backend_name": "FLASH_ATTN", "cache_dtype": "auto", "is_hma_enabled": hma,
         "speculative_config": None, "transfer_mode": mode}
    if spec:
        s = {"method": "eagle3", "model": "org/draft", "revision": None, "code_revision": None,
             "kv_cache_dtype": "auto", "auxiliary_layer_ids": [1, 13, 24]}
        if version < 16:
            s["parallel_drafting"] = True
        f["speculative_config"] = s
    return f


def main(paths):
    mods = [installed] + [load(p) for p in paths]
    enc = msgspec.msgpack.Encoder()
    metadata, payloads, hashes, versions = [], [], [], []
    for mod in sorted(mods, key=lambda m: m.NIXL_CONNECTOR_VERSION):
        v = mod.NIXL_CONNECTOR_VERSION
        versions.append(v)
        for name, md in cases(mod):
            raw = enc.encode(md)
            assert msgspec.msgpack.decode(raw, type=mod.NixlAgentMetadata) == md
            metadata.append({"name": name, "version": v, "value": as_json(md), "hex": raw.hex()})
        for name, mode, hma, spec in (("pull", "pull", True, False), ("push_hma_off", "push", False, False),
                                      ("pull_eagle3", "pull", True, True)):
            digest = mod.compute_nixl_compatibility_hash(Stand(eagle3() if spec else None, hma), "FLASH_ATTN", mode)
            f = factors(v, mode, hma, spec)
            js = json.dumps(f, sort_keys=True)
            # The factors written here are the ones vLLM hashed.
            assert hashlib.sha256(js.encode()).hexdigest() == digest, (v, name)
            hashes.append({"name": name, "version": v, "factors": f, "json": js, "sha256": digest})
        md = cases(mod)[2][1]
        p = mod.NixlHandshakePayload(compatibility_hash=hashes[-3]["sha256"], agent_metadata_bytes=enc.encode(md))
        payloads.append({"name": "gonixl_two_layers", "version": v, "compatibility_hash": p.compatibility_hash,
                         "agent_metadata_hex": p.agent_metadata_bytes.hex(), "hex": enc.encode(p).hex()})
    out = {
        "source": ("Made by vLLM's own code (gen_vllm_vectors.py): NixlAgentMetadata and NixlHandshakePayload of "
                   "nixl/metadata.py encoded with msgspec %s's msgpack Encoder as base_worker.py does, and "
                   "compute_nixl_compatibility_hash, of vllm %s (installed) and of the nixl/metadata.py of "
                   "vllm 0.31.0, 0.32.0 and 0.33.0 loaded beside it. Versions: %s."
                   % (msgspec.__version__, vllm.__version__, versions)),
        "agent_metadata": metadata,
        "handshake_payloads": payloads,
        "hashes": hashes,
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
