# Checks testdata/vllm/vectors.json against a real msgspec (run from the
# repository root with msgspec importable:
#   python3 testdata/vllm/check_msgspec.py [vectors.json [push_reg.json
#   [groups.json]]]).
#
# The vectors were laid down by hand from msgspec's encoder rules
# (gen_vectors.py); this script asks msgspec itself. The two wire
# dataclasses below are written from the field table in docs/vllm.md (vLLM's
# NIXL connector version 12), not taken from vLLM. For each vector:
#   - an encoding vector must decode into its dataclass and encode back to the
#     very same bytes, and its decoded value must equal the vector's "value";
#   - a decode-only vector must decode, and its value must equal "value";
#   - an invalid vector is reported as msgspec refusing it or not: gonixl is
#     stricter than msgspec on purpose in some cases (lengths that disagree,
#     repeated keys), which is listed, not failed.
# The PUSH_REG cases of testdata/push_reg.json are checked too, and the
# grouped-model metadata of testdata/vllm/groups.json (gen_groups.py) as
# encoding vectors, its invalid cases as values msgspec must decode (they
# are refused by gonixl's layout mapping, not by the wire type). It exits 1
# on the first real disagreement.
import dataclasses
import json
import math
import sys
from typing import Optional

import msgspec


@dataclasses.dataclass
class NixlAgentMetadata:
    engine_id: str
    agent_metadata: bytes
    kv_caches_base_addr: list[int]
    device_id: int
    num_blocks: int
    block_lens: list[int]
    block_strides: list[int]
    kv_cache_layout: str
    block_size: int
    ssm_sizes: tuple[int, int]
    attn_backend_name: str
    physical_blocks_per_logical_kv_block: int
    region_num_blocks: Optional[list[int]] = None
    region_group_ids: Optional[list[int]] = None
    region_names: Optional[list[str]] = None
    region_mem_types: Optional[list[str]] = None
    dcp_size: int = 1
    pcp_size: int = 1
    region_members: list[list[str]] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class NixlHandshakePayload:
    compatibility_hash: str
    agent_metadata_bytes: bytes


def as_json(md):
    v = dataclasses.asdict(md)
    for k, x in v.items():
        if isinstance(x, bytes):
            v[k] = x.hex()
        elif isinstance(x, tuple):
            v[k] = list(x)
    return v


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def main(path, push_reg_path, groups_path):
    d = json.load(open(path))
    enc = msgspec.msgpack.Encoder()
    checked = 0

    for v in d["agent_metadata"]:
        raw = bytes.fromhex(v["hex"])
        md = msgspec.msgpack.decode(raw, type=NixlAgentMetadata)
        if enc.encode(md) != raw:
            fail("agent_metadata %s: msgspec encodes %s" % (v["name"], enc.encode(md).hex()))
        if as_json(md) != v["value"]:
            fail("agent_metadata %s: value %s" % (v["name"], as_json(md)))
        checked += 1
    for v in d["agent_metadata_decode_only"]:
        md = msgspec.msgpack.decode(bytes.fromhex(v["hex"]), type=NixlAgentMetadata)
        if as_json(md) != v["value"]:
            fail("agent_metadata_decode_only %s: value %s" % (v["name"], as_json(md)))
        checked += 1

    for v in d["handshake_payloads"]:
        raw = bytes.fromhex(v["hex"])
        p = msgspec.msgpack.decode(raw, type=NixlHandshakePayload)
        if p.compatibility_hash != v["compatibility_hash"] or p.agent_metadata_bytes.hex() != v["agent_metadata_hex"]:
            fail("handshake_payloads %s: decoded %r" % (v["name"], p))
        # Only a payload in msgspec's own key order re-encodes to itself.
        if not v["name"].startswith("shuffled") and enc.encode(p) != raw:
            fail("handshake_payloads %s: msgspec encodes %s" % (v["name"], enc.encode(p).hex()))
        checked += 1

    for v in d["meta_requests"]:
        raw = bytes.fromhex(v["hex"])
        if enc.encode((b"get_meta_msg", v["pp"], v["tp"])) != raw:
            fail("meta_requests %s" % v["name"])
        checked += 1
    for v in d["meta_requests_decode_only"]:
        got = msgspec.msgpack.decode(bytes.fromhex(v["hex"]))
        if list(got[1:]) != [v["pp"], v["tp"]]:
            fail("meta_requests_decode_only %s: %r" % (v["name"], got))
        checked += 1

    for v in d["timestamps"]:
        if enc.encode(float(v["seconds"])) != bytes.fromhex(v["hex"]):
            fail("timestamps %s" % v["name"])
        checked += 1
    for v in d["timestamps_decode_only"]:
        got = msgspec.msgpack.decode(bytes.fromhex(v["hex"]), type=float)
        if not math.isclose(got, v["seconds"], rel_tol=1e-6):
            fail("timestamps_decode_only %s: %r" % (v["name"], got))
        checked += 1

    lenient = []
    for kind, typ in (("agent_metadata_invalid", NixlAgentMetadata), ("handshake_payloads_invalid", NixlHandshakePayload)):
        for v in d[kind]:
            try:
                msgspec.msgpack.decode(bytes.fromhex(v["hex"]), type=typ)
                lenient.append("%s/%s" % (kind, v["name"]))
            except (msgspec.ValidationError, msgspec.DecodeError):
                pass
            checked += 1

    # PUSH_REG: vLLM's decode sends msgpack of a plain dict after the prefix;
    # msgspec writes a dict as a map in insertion order, which JSON keeps.
    reg = json.load(open(push_reg_path))
    for c in reg["cases"]:
        if not c["valid"] or "expect" not in c:
            continue
        raw = bytes.fromhex(c["hex"])
        if not raw.startswith(b"PUSH_REG:"):
            continue
        body = raw[len(b"PUSH_REG:"):]
        if msgspec.msgpack.decode(body) != c["expect"]:
            fail("push_reg %s: decodes to %r" % (c["name"], msgspec.msgpack.decode(body)))
        if enc.encode(c["expect"]) == body:
            checked += 1
        else:
            lenient.append("push_reg/%s (decodes; not msgspec's most compact bytes)" % c["name"])

    g = json.load(open(groups_path))
    for v in g["grouped_metadata"]:
        raw = bytes.fromhex(v["hex"])
        md = msgspec.msgpack.decode(raw, type=NixlAgentMetadata)
        if enc.encode(md) != raw:
            fail("grouped_metadata %s: msgspec encodes %s" % (v["name"], enc.encode(md).hex()))
        if as_json(md) != v["value"]:
            fail("grouped_metadata %s: value %s" % (v["name"], as_json(md)))
        checked += 1
    for v in g["grouped_metadata_invalid"]:
        raw = bytes.fromhex(v["hex"])
        md = msgspec.msgpack.decode(raw, type=NixlAgentMetadata)
        if enc.encode(md) != raw:
            fail("grouped_metadata_invalid %s: msgspec encodes %s" % (v["name"], enc.encode(md).hex()))
        checked += 1

    print("msgspec %s agrees on %d vectors" % (msgspec.__version__, checked))
    if lenient:
        print("msgspec accepts, gonixl refuses (stricter on purpose):", ", ".join(lenient))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "testdata/vllm/vectors.json",
         sys.argv[2] if len(sys.argv) > 2 else "testdata/push_reg.json",
         sys.argv[3] if len(sys.argv) > 3 else "testdata/vllm/groups.json")
