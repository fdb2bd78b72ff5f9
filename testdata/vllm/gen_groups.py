# Generates testdata/vllm/groups.json (python3 testdata/vllm/gen_groups.py >
# testdata/vllm/groups.json): vLLM NixlAgentMetadata of ranks of grouped
# models (several KV-cache groups, SSM state, the token-major layout), with
# the layout gonixl maps each to and the errors of metadata that disagrees
# with the model.
#
# The metadata fields and their meaning are vLLM's at connector version 12
# (nixl/metadata.py @ 02cfb534df5674737558730b10f23d1b7aef9b7c; how
# register_kv_caches fills region_group_ids, block_lens, region_num_blocks,
# ssm_sizes and physical_blocks_per_logical_kv_block: nixl/base_worker.py @
# 039e79a67a8416957c1875f9e73655a705bbcbe7). The bytes are written here by a
# small msgpack encoder of msgspec's most compact forms (written from the
# msgpack spec, not from gonixl's Go encoder); check_msgspec.py checks them
# against msgspec itself. The expected layouts follow from the sizes by
# hand: a packed attention block is KV heads on the rank x block size x
# head size x 2 (K and V) x dtype bytes; an SSM page is the conv parts and
# the temporal state of the model divided by the TP size.
import json, struct

def enc(v):
    if v is None:
        return b"\xc0"
    if isinstance(v, bool):
        return b"\xc3" if v else b"\xc2"
    if isinstance(v, int):
        if 0 <= v <= 0x7f: return bytes([v])
        if -32 <= v < 0: return struct.pack(">b", v)
        if 0 <= v <= 0xff: return b"\xcc" + struct.pack(">B", v)
        if 0 <= v <= 0xffff: return b"\xcd" + struct.pack(">H", v)
        if 0 <= v <= 0xffffffff: return b"\xce" + struct.pack(">I", v)
        if v >= 0: return b"\xcf" + struct.pack(">Q", v)
        if v >= -128: return b"\xd0" + struct.pack(">b", v)
        if v >= -32768: return b"\xd1" + struct.pack(">h", v)
        return b"\xd2" + struct.pack(">i", v)
    if isinstance(v, str):
        b = v.encode()
        if len(b) < 32: return bytes([0xa0 | len(b)]) + b
        if len(b) <= 0xff: return b"\xd9" + bytes([len(b)]) + b
        return b"\xda" + struct.pack(">H", len(b)) + b
    if isinstance(v, bytes):
        if len(v) <= 0xff: return b"\xc4" + bytes([len(v)]) + v
        return b"\xc5" + struct.pack(">H", len(v)) + v
    if isinstance(v, (list, tuple)):
        head = bytes([0x90 | len(v)]) if len(v) < 16 else b"\xdc" + struct.pack(">H", len(v))
        return head + b"".join(enc(x) for x in v)
    if isinstance(v, dict):
        head = bytes([0x80 | len(v)]) if len(v) < 16 else b"\xde" + struct.pack(">H", len(v))
        return head + b"".join(enc(k) + enc(x) for k, x in v.items())
    raise TypeError(v)

KEYS = ["engine_id", "agent_metadata", "kv_caches_base_addr", "device_id", "num_blocks", "block_lens",
        "block_strides", "kv_cache_layout", "block_size", "ssm_sizes", "attn_backend_name",
        "physical_blocks_per_logical_kv_block", "region_num_blocks", "region_group_ids", "region_names",
        "region_mem_types", "dcp_size", "pcp_size", "region_members"]

def metadata(bases, num_blocks, block_lens, layout, block_size, ssm, ratio, group_ids):
    n = len(bases)
    v = {"engine_id": "prefill", "agent_metadata": "a1a2", "kv_caches_base_addr": bases, "device_id": 1,
         "num_blocks": num_blocks, "block_lens": block_lens, "block_strides": block_lens, "kv_cache_layout": layout,
         "block_size": block_size, "ssm_sizes": ssm, "attn_backend_name": "FLASH_ATTN",
         "physical_blocks_per_logical_kv_block": ratio, "region_num_blocks": [num_blocks] * n,
         "region_group_ids": group_ids, "region_names": None, "region_mem_types": ["VRAM"] * n,
         "dcp_size": 1, "pcp_size": 1, "region_members": []}
    assert list(v) == KEYS
    wire = dict(v, agent_metadata=bytes.fromhex(v["agent_metadata"]))
    return v, enc(wire).hex()

# The test shapes (internal/groupids/grouptest): 2 KV heads of head size 4
# in bfloat16, so a packed token of one head is 4 x 2 (K, V) x 2 = 16 bytes.
HYBRID = {"layers": 3, "kv_heads": 2, "head_dim": 4, "dtype": "bfloat16", "block_size": 16, "blocks": 32,
          "groups": [{"kind": "full", "layers": 1}, {"kind": "ssm", "layers": 2, "conv": [24, 8, 8], "state": 32}]}
SWA = {"layers": 2, "kv_heads": 2, "head_dim": 4, "dtype": "bfloat16", "block_size": 16, "blocks": 32,
       "groups": [{"kind": "full", "layers": 1}, {"kind": "sliding_window", "layers": 1, "window": 24}]}
SHARED = {"layers": 4, "kv_heads": 2, "head_dim": 4, "dtype": "bfloat16", "block_size": 16, "blocks": 32,
          "groups": [{"kind": "full", "layers": 2}, {"kind": "ssm", "layers": 2, "conv": [24, 8, 8], "state": 32}]}
B = 0x7f0000000000

cases = []
# 1. A hybrid rank as gonixl lays it out (regions group after group), TP 2
# rank 1: the full layer's region has 32 blocks of 1 head x 16 tokens x 16
# bytes = 256; each Mamba layer's region 32 slots of (24+8+8+32)/2 = 36
# bytes (conv 20, state 16).
v, x = metadata([B, B + 32 * 256, B + 32 * 256 + 32 * 36], 32, [256, 36, 36], "LBHNC", 16, [20, 16], 1, [0, 1, 1])
cases.append({"name": "hybrid_tp2_rank1", "geometry": HYBRID, "peer_tp": 2, "rank": 1, "kv_layout": "LBHNC", "value": v, "hex": x,
              "layout": {"order": "", "block_size": 16, "num_blocks": 32, "kv_heads": 1, "head_bytes": 16,
                         "groups": [{"kind": "full", "regions": [0]},
                                    {"kind": "ssm", "regions": [1, 2], "ssm": {"conv": [12, 4, 4], "state": 16}}]}})
# 2. A sliding-window rank at TP 1 with token-major blocks: 2 heads x 16
# tokens x 16 bytes = 512 per block.
v, x = metadata([B, B + 32 * 512], 32, [512, 512], "LBNHC", 16, [0, 0], 1, [0, 1])
cases.append({"name": "swa_tp1_nhd", "geometry": SWA, "peer_tp": 1, "rank": 0, "kv_layout": "LBHNC", "value": v, "hex": x,
              "layout": {"order": "NHD", "block_size": 16, "num_blocks": 32, "kv_heads": 2, "head_bytes": 16,
                         "groups": [{"kind": "full", "regions": [0]},
                                    {"kind": "sliding_window", "window": 24, "regions": [1]}]}})
# 3. vLLM's hybrid manager: each tensor shared by an attention and a Mamba
# layer (region_group_ids -1), kernel blocks of 16 tokens in logical blocks
# of 32 (ratio 2, 64 physical blocks), TP 2 rank 0: block_lens 256 for both
# views, so the Mamba page is 2 x 256 = 512 bytes, its conv (20) and state
# (16) padded.
v, x = metadata([B, B + 64 * 256], 64, [256, 256], "LBHNC", 16, [20, 16], 2, [-1, -1])
cases.append({"name": "hybrid_shared_tensors_ratio2", "geometry": SHARED, "peer_tp": 2, "rank": 0, "kv_layout": "LBHNC", "value": v, "hex": x,
              "layout": {"order": "", "block_size": 16, "num_blocks": 64, "kv_heads": 1, "head_bytes": 16,
                         "groups": [{"kind": "full", "regions": [0, 1], "PhysicalPerLogical": 2},
                                    {"kind": "ssm", "regions": [0, 1], "PhysicalPerLogical": 2,
                                     "ssm": {"conv": [12, 4, 4], "state": 16, "page": 512}}]}})

invalid = []
def bad(name, geometry, peer_tp, rank, edits, error):
    v, _ = metadata([B, B + 32 * 256, B + 32 * 256 + 32 * 36], 32, [256, 36, 36], "LBHNC", 16, [20, 16], 1, [0, 1, 1])
    v.update(edits)
    wire = dict(v, agent_metadata=bytes.fromhex(v["agent_metadata"]))
    invalid.append({"name": name, "geometry": geometry, "peer_tp": peer_tp, "rank": rank, "hex": enc(wire).hex(), "error": error})

pre = 'vllm: engine "prefill" rank 1: vllm: incompatible peer: '
bad("ssm_sizes_other_state", HYBRID, 2, 1, {"ssm_sizes": [20, 17]},
    pre + "ssm_sizes is [20 17], Groups[1] (ssm) of the model's geometry gives [20 16] at TP size 2 (conv parts [12 4 4], state 16)")
bad("ssm_sizes_other_tp", HYBRID, 1, 0, {},
    'vllm: engine "prefill" rank 0: vllm: incompatible peer: ssm_sizes is [20 16], Groups[1] (ssm) of the model\'s geometry gives [40 32] at TP size 1 (conv parts [24 8 8], state 32)')
bad("group_id_out_of_range", HYBRID, 2, 1, {"region_group_ids": [0, 1, 2]},
    pre + "region_group_ids[2] is 2: the model's geometry has 2 KV-cache groups")
bad("group_regions_other_model", HYBRID, 2, 1, {"region_group_ids": [0, 0, 1]},
    pre + "region_group_ids give Groups[0] (full) 2 regions, the model's geometry 1 layers (descriptors.Geometry.Groups)")
bad("ssm_page_below_state", HYBRID, 2, 1, {"block_lens": [256, 30, 36], "block_strides": [256, 30, 36]},
    pre + "block_lens[1] is 30: times physical_blocks_per_logical_kv_block 1, an SSM page of 30 bytes, below ssm_sizes' 36")
bad("ssm_without_groups", {"layers": 3, "kv_heads": 2, "head_dim": 4, "dtype": "bfloat16", "block_size": 16, "blocks": 32}, 2, 1, {"region_group_ids": [0, 0, 0]},
    'vllm: incompatible peer: engine "prefill" rank 1: ssm_sizes is [20 16]: the peer holds SSM (Mamba) state, the local model\'s geometry has no KV-cache groups (descriptors.Geometry.Groups)')

print(json.dumps({"source": __doc__ if False else "testdata/vllm/gen_groups.py: grouped-model NixlAgentMetadata (connector version 12; field meanings from nixl/metadata.py @ 02cfb534df5674737558730b10f23d1b7aef9b7c and nixl/base_worker.py @ 039e79a67a8416957c1875f9e73655a705bbcbe7), bytes from a spec-written msgpack encoder of msgspec's compact forms, checked by check_msgspec.py",
                  "grouped_metadata": cases, "grouped_metadata_invalid": invalid}, indent=1))
