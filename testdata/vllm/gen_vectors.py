# Writes testdata/vllm/vectors.json (run from the repository root:
#   python3 testdata/vllm/gen_vectors.py > testdata/vllm/vectors.json).
# No msgpack library is used: every byte string is laid down piece by piece
# from the msgpack spec, in the most compact forms msgspec's encoder writes,
# so that the Go encoder is checked against an independent construction.
# The compatibility hashes come from Python's own json.dumps and hashlib.
import json, hashlib, struct

def h(s): return s.encode().hex()
def fixstr(s):
    assert len(s) < 32
    return "%02x" % (0xa0 | len(s)) + h(s)
def str8(s):
    assert 32 <= len(s) < 256
    return "d9%02x" % len(s) + h(s)
def s(x): return fixstr(x) if len(x) < 32 else str8(x)

# --- Example 1, byte by byte (facts 2.3) ---
ex1 = [
 "de0013",
 fixstr("engine_id"), fixstr("e1"),
 fixstr("agent_metadata"), "c4" "02" "0102",
 fixstr("kv_caches_base_addr"), "91" "cf" "00007f0000000000",
 fixstr("device_id"), "00",
 fixstr("num_blocks"), "cd" "03e8",
 fixstr("block_lens"), "91" "ce" "00010000",
 fixstr("block_strides"), "91" "ce" "00010000",
 fixstr("kv_cache_layout"), fixstr("LBHNC"),
 fixstr("block_size"), "10",
 fixstr("ssm_sizes"), "92" "00" "00",
 fixstr("attn_backend_name"), fixstr("FLASH_ATTN"),
 str8("physical_blocks_per_logical_kv_block"), "01",
 fixstr("region_num_blocks"), "c0",
 fixstr("region_group_ids"), "c0",
 fixstr("region_names"), "c0",
 fixstr("region_mem_types"), "c0",
 fixstr("dcp_size"), "01",
 fixstr("pcp_size"), "01",
 fixstr("region_members"), "90",
]
ex1hex = "".join(ex1)
assert len(ex1hex) // 2 == 347, len(ex1hex)//2

# --- Example 2: two regions, every optional list set, wide integers ---
agent2 = bytes(range(256)) + b"\x00" * 44   # 300 bytes -> bin16
layer0 = "model.layers.0.self_attn.attn"       # 29 bytes, fixstr
layer1 = "model.language_model.layers.1.self_attn.attn"  # 44 bytes, str8
engine2 = "prefill-engine-0123456789abcdef-x"  # 33 bytes, str8
ex2 = [
 "de0013",
 fixstr("engine_id"), str8(engine2),
 fixstr("agent_metadata"), "c5" "012c" + agent2.hex(),
 fixstr("kv_caches_base_addr"), "92" "cf" "00007f1234560000" "cf" "ffffffffffffff00",
 fixstr("device_id"), "07",
 fixstr("num_blocks"), "ce" "00011170",          # 70000
 fixstr("block_lens"), "92" "cd" "8000" "cc" "80", # 32768, 128
 fixstr("block_strides"), "92" "cd" "8000" "cc" "ff",  # 32768, 255
 fixstr("kv_cache_layout"), fixstr("LBNHC"),
 fixstr("block_size"), "cc" "80",                  # 128
 fixstr("ssm_sizes"), "92" "cd" "3000" "ce" "00100000",  # 12288, 1048576
 fixstr("attn_backend_name"), fixstr("FLASHINFER"),
 str8("physical_blocks_per_logical_kv_block"), "04",
 fixstr("region_num_blocks"), "92" "ce" "00011170" "cd" "4000",   # 70000, 16384
 fixstr("region_group_ids"), "92" "ff" "7f",        # -1, 127
 fixstr("region_names"), "92" + s(layer0) + s(layer1),
 fixstr("region_mem_types"), "92" + fixstr("VRAM") + fixstr("DRAM"),
 fixstr("dcp_size"), "02",
 fixstr("pcp_size"), "01",
 fixstr("region_members"), "92" "92" + s(layer0) + s("model.layers.2.self_attn.attn") + "91" + s(layer1),
]
ex2hex = "".join(ex2)
ex2val = {
 "engine_id": engine2, "agent_metadata": agent2.hex(),
 "kv_caches_base_addr": [0x7f1234560000, 0xffffffffffffff00],
 "device_id": 7, "num_blocks": 70000, "block_lens": [32768, 128], "block_strides": [32768, 255],
 "kv_cache_layout": "LBNHC", "block_size": 128, "ssm_sizes": [12288, 1048576],
 "attn_backend_name": "FLASHINFER", "physical_blocks_per_logical_kv_block": 4,
 "region_num_blocks": [70000, 16384], "region_group_ids": [-1, 127],
 "region_names": [layer0, layer1], "region_mem_types": ["VRAM", "DRAM"],
 "dcp_size": 2, "pcp_size": 1,
 "region_members": [[layer0, "model.layers.2.self_attn.attn"], [layer1]],
}
ex1val = {
 "engine_id": "e1", "agent_metadata": "0102", "kv_caches_base_addr": [0x7f0000000000],
 "device_id": 0, "num_blocks": 1000, "block_lens": [65536], "block_strides": [65536],
 "kv_cache_layout": "LBHNC", "block_size": 16, "ssm_sizes": [0, 0],
 "attn_backend_name": "FLASH_ATTN", "physical_blocks_per_logical_kv_block": 1,
 "region_num_blocks": None, "region_group_ids": None, "region_names": None,
 "region_mem_types": None, "dcp_size": 1, "pcp_size": 1, "region_members": [],
}

# --- Decode-only: keys shuffled, an unknown key, defaulted keys left out
# (what a version-10 sender writes, plus a version-13-style extra key). ---
dec1 = "".join([
 "8d",  # 13 entries
 fixstr("block_size"), "d0" "10",        # int8 form, still 16
 fixstr("engine_id"), fixstr("e1"),
 str8("physical_blocks_per_logical_kv_block"), "01",
 fixstr("packed_block_stride"), "93" "01" + fixstr("x") + "c0",
 fixstr("agent_metadata"), "c4" "02" "0102",
 fixstr("num_blocks"), "cf" "00000000000003e8",   # widest form of 1000
 fixstr("block_strides"), "dc" "0001" "ce" "00010000",  # array16 header
 fixstr("block_lens"), "91" "ce" "00010000",
 fixstr("kv_caches_base_addr"), "91" "cf" "00007f0000000000",
 fixstr("device_id"), "00",
 fixstr("kv_cache_layout"), "d9" "05" + h("LBHNC"),     # str8 form of a short string
 fixstr("ssm_sizes"), "92" "00" "00",
 fixstr("attn_backend_name"), fixstr("FLASH_ATTN"),
])

# --- Invalid agent metadata: ex1 with one piece changed, and the error text ---
def ex1_with(key, value=None, drop=False, header="de0013"):
    parts = list(ex1)
    parts[0] = header
    i = parts.index(s(key))
    if drop:
        del parts[i:i+2]
    else:
        parts[i+1] = value
    return "".join(parts)
invalid_md = [
 ("missing_required", ex1_with("engine_id", drop=True, header="de0012"), "agent metadata field engine_id is missing"),
 ("nil_required", ex1_with("engine_id", "c0"), "field engine_id: vllm: malformed message: at byte 13: want a string, got nil (0xc0)"),
 ("str_for_int", ex1_with("num_blocks", fixstr("1000")), "field num_blocks: vllm: malformed message: at byte 87: want an integer, got a string (0xa4)"),
 ("bool_for_int", ex1_with("block_size", "c3"), "field block_size: vllm: malformed message: at byte 160: want an integer, got a bool (0xc3)"),
 ("float_for_int", ex1_with("block_size", "cb4030000000000000"), "field block_size: vllm: malformed message: at byte 160: want an integer, got a float (0xcb)"),
 ("str_for_bin", ex1_with("agent_metadata", fixstr("ab")), "field agent_metadata: vllm: malformed message: at byte 31: want binary, got a string (0xa2)"),
 ("ssm_sizes_three", ex1_with("ssm_sizes", "93000000"), "field ssm_sizes: vllm: malformed message: at byte 171: array of 3 entries, want 2"),
 ("negative_device", ex1_with("device_id", "ff"), "field device_id: vllm: malformed message: at byte 75: integer -1 is below 0"),
 ("negative_addr", ex1_with("kv_caches_base_addr", "91ff"), "field kv_caches_base_addr: entry 0: vllm: malformed message: at byte 56: integer -1 is negative"),
 ("zero_dcp", ex1_with("dcp_size", "00"), "field dcp_size: vllm: malformed message: at byte 320: integer 0 is below 1"),
 ("group_id_below_shared", ex1_with("region_group_ids", "91fe"), "field region_group_ids: entry 0: vllm: malformed message: at byte 279: integer -2 is below -1"),
 ("region_list_length", ex1_with("region_num_blocks", "92cd03e8cd03e8"), "agent metadata field region_num_blocks has 2 entries, kv_caches_base_addr has 1"),
 ("members_length", ex1_with("region_members", "929090"), "agent metadata field region_members has 2 entries, kv_caches_base_addr has 1"),
 ("block_lens_length", ex1_with("block_lens", "90"), "agent metadata field block_lens has 0 entries, kv_caches_base_addr has 1"),
 ("stride_below_len", ex1_with("block_strides", "91cdffff"), "agent metadata field block_strides entry 0 is 65535, below block_lens entry 65536"),
 ("huge_array_header", ex1_with("kv_caches_base_addr", "ddffffffff"), "field kv_caches_base_addr: vllm: malformed message: at byte 55: array of 4294967295 entries, limit 32768"),
 ("over_max_regions", ex1_with("block_lens", "dd00008001"), "field block_lens: vllm: malformed message: at byte 101: array of 32769 entries, limit 32768"),
 ("long_string", ex1_with("kv_cache_layout", "da0401" + "41"*1025), "field kv_cache_layout: vllm: malformed message: at byte 143: string of 1025 bytes, limit 1024"),
 ("trailing_byte", ex1hex + "00", "agent metadata: 1 bytes after the value"),
 ("repeated_key", "de0014" + ex1hex[6:] + fixstr("dcp_size") + "01", "agent metadata field dcp_size appears twice"),
 ("not_a_map", "93010203", "agent metadata: vllm: malformed message: at byte 0: want a map, got an array (0x93)"),
 ("int_key", "de0001" "01" "01", "agent metadata: map key: vllm: malformed message: at byte 3: want a string, got an integer (0x01)"),
 ("truncated", ex1hex[:-2], "agent metadata field region_members: vllm: malformed message: at byte 346: message ends early"),
 ("empty", "", "agent metadata: vllm: malformed message: at byte 0: message ends early"),
]

# --- Hashes (facts section 3), with Python's json and hashlib ---
base = {"vllm_version": "0.27.1", "nixl_connector_version": 12, "model": "Qwen/Qwen3-0.6B",
        "dtype": "torch.bfloat16", "num_kv_heads": 8, "head_size": 128, "num_hidden_layers": 28,
        "attn_backend_name": "FLASH_ATTN", "cache_dtype": "auto", "is_hma_enabled": True,
        "speculative_config": None, "transfer_mode": "pull"}
ex = {}
ex["ex1_pull_hma"] = dict(base)
ex["ex2_push"] = dict(base, transfer_mode="push")
ex["ex3_hma_off"] = dict(base, is_hma_enabled=False)
ex["ex4_eagle3"] = dict(base, speculative_config={"method": "eagle3", "model": "org/draft",
    "revision": None, "code_revision": None, "parallel_drafting": False, "kv_cache_dtype": "auto",
    "auxiliary_layer_ids": (1, 13, 24)})
ex["ex5_escapes"] = dict(base, model="/models/caf\u00e9 \"q\\u\"/\u6a21\u578b\U0001F600\t\n\b\f\r\x01\x1f\x7f\x80",
    vllm_version="0.28.0.dev12+g0123abc", speculative_config={"method": "eagle", "model": "d\u00e9",
    "revision": "main", "code_revision": "v1/\u00ff", "parallel_drafting": True,
    "kv_cache_dtype": "fp8_e4m3", "auxiliary_layer_ids": None}, num_kv_heads=-1)
want = {"ex1_pull_hma": "407674cde2de5934d995c8dac06fb687b73b3d66a25e6fdbd9d52d237c3b50a5",
        "ex2_push": "24d36b0ac598b5dcab49b1c291d31bceb4652b5105c35a85083091f99dd88190",
        "ex3_hma_off": "52bf7c7e0758a35514b5b8f718bbe828fb16ab2362b1fa26a7732f1385d8a03b",
        "ex4_eagle3": "3d93461c87fee2e7fb94a04e1f7955db7bc1eefdd4a352283e7177cb4c91f245"}
hashes = []
for name, d in ex.items():
    js = json.dumps(d, sort_keys=True)
    dig = hashlib.sha256(js.encode()).hexdigest()
    if name in want:
        assert dig == want[name], (name, dig)
    f = dict(d)
    # f keeps nixl_connector_version: the tests build CompatFactors from it
    hashes.append({"name": name, "factors": f, "json": js, "sha256": dig})

def payload(hashstr, inner_hex):
    n = len(inner_hex) // 2
    assert 256 <= n < 65536
    return "82" + fixstr("compatibility_hash") + "d940" + h(hashstr) + fixstr("agent_metadata_bytes") + "c5%04x" % n + inner_hex

out = {
 "source": ("Hand-built from reading vLLM's code (metadata.py @ 02cfb534df5674737558730b10f23d1b7aef9b7c, "
            "base_worker.py/push_worker.py @ 039e79a67a8416957c1875f9e73655a705bbcbe7, base_scheduler.py @ "
            "0050936b22adda2ef0197fa3bb2551fe6c5437dc, hash_factors in vllm/config/utils.py) and msgspec's "
            "encoder rules (jcrist/msgspec _core.c @ 3b2543b838a01dfac23e0b8d8746ebb273254e2d), not captured from a "
            "running vLLM. Every msgpack byte was laid down piece by piece from the "
            "msgpack spec and the most compact forms msgspec writes. The hash JSON strings and digests were made "
            "with CPython 3.11's json.dumps(sort_keys=True) and hashlib.sha256; ex1..ex4 equal the worked examples "
            "in the facts, ex5 adds escapes. check_msgspec.py then checks them against msgspec itself."),
 "meta_requests": [
   {"name": "pp0_tp0", "pp": 0, "tp": 0, "hex": "93" "c40c" + h("get_meta_msg") + "00" "00"},
   {"name": "pp0_tp3", "pp": 0, "tp": 3, "hex": "93" "c40c" + h("get_meta_msg") + "00" "03"},
   {"name": "pp1_tp200", "pp": 1, "tp": 200, "hex": "93" "c40c" + h("get_meta_msg") + "01" "cc" "c8"},
 ],
 "meta_requests_decode_only": [
   {"name": "str_form", "pp": 2, "tp": 5, "hex": "93" + fixstr("get_meta_msg") + "02" "05",
    "note": "vLLM's listener answers a str first element too (after a warning)"},
   {"name": "array16_wide_ints", "pp": 0, "tp": 3, "hex": "dc0003" "c40c" + h("get_meta_msg") + "d000" "cf0000000000000003"},
 ],
 "timestamps": [
   {"name": "perf_counter", "seconds": 12345.5, "hex": "cb" + struct.pack(">d", 12345.5).hex()},
   {"name": "zero", "seconds": 0.0, "hex": "cb" + struct.pack(">d", 0.0).hex()},
 ],
 "timestamps_decode_only": [
   {"name": "fixint", "seconds": 7.0, "hex": "07"},
   {"name": "uint32", "seconds": 4000000000.0, "hex": "ce" + struct.pack(">I", 4000000000).hex()},
   {"name": "negative_int16", "seconds": -300.0, "hex": "d1" + struct.pack(">h", -300).hex()},
   {"name": "float32", "seconds": 1.5, "hex": "ca" + struct.pack(">f", 1.5).hex()},
 ],
 "hashes": hashes,
 "agent_metadata": [
   {"name": "facts_2_3_one_region", "value": ex1val, "hex": ex1hex, "bytes": len(ex1hex)//2},
   {"name": "two_regions_all_lists", "value": ex2val, "hex": ex2hex, "bytes": len(ex2hex)//2},
 ],
 "agent_metadata_decode_only": [
   {"name": "shuffled_unknown_defaults", "value": ex1val, "hex": dec1,
    "note": "keys out of order, an unknown key skipped, region_*/dcp_size/pcp_size/region_members left out (defaults), non-compact but valid integer, array and string forms"},
 ],
 "agent_metadata_invalid": [{"name": n, "hex": x, "error": e} for n, x, e in invalid_md],
 "meta_requests_invalid": [
   {"name": "other_message", "hex": "93" "c40c" + h("get_meta_msx") + "0000", "error": "element 0 is \"get_meta_msx\", want \"get_meta_msg\""},
   {"name": "two_elements", "hex": "92" "c40c" + h("get_meta_msg") + "00", "error": "array of 2 elements, want 3"},
   {"name": "negative_tp", "hex": "93" "c40c" + h("get_meta_msg") + "00ff", "error": "tp rank: vllm: malformed message: at byte 16: integer -1 is below 0"},
   {"name": "float_pp", "hex": "93" "c40c" + h("get_meta_msg") + "cb0000000000000000" "00", "error": "pp rank: vllm: malformed message: at byte 15: want an integer, got a float (0xcb)"},
   {"name": "trailing", "hex": "93" "c40c" + h("get_meta_msg") + "000000", "error": "meta request: 1 bytes after the value"},
   {"name": "map", "hex": "80", "error": "want an array, got a map (0x80)"},
 ],
 "timestamps_invalid": [
   {"name": "string", "hex": fixstr("1.5"), "error": "want a number, got a string (0xa3)"},
   {"name": "bool", "hex": "c3", "error": "want a number, got a bool (0xc3)"},
   {"name": "nan", "hex": "cb7ff8000000000000", "error": "NaN is not a clock reading"},
   {"name": "infinity", "hex": "cb7ff0000000000000", "error": "+Inf is not a clock reading"},
   {"name": "trailing", "hex": "0101", "error": "timestamp: 1 bytes after the value"},
   {"name": "truncated", "hex": "cb40c8", "error": "timestamp: vllm: malformed message: at byte 1: message ends early: need 8 more bytes, have 2"},
 ],
 "handshake_payloads_invalid": [
   {"name": "missing_metadata", "hex": "81" + fixstr("compatibility_hash") + fixstr("x"), "error": "handshake payload field agent_metadata_bytes is missing"},
   {"name": "metadata_as_str", "hex": "82" + fixstr("compatibility_hash") + fixstr("x") + fixstr("agent_metadata_bytes") + fixstr("ab"), "error": "handshake payload field agent_metadata_bytes: vllm: malformed message: at byte 43: want binary, got a string (0xa2)"},
   {"name": "hash_as_bin", "hex": "82" + fixstr("compatibility_hash") + "c40178" + fixstr("agent_metadata_bytes") + "c400", "error": "handshake payload field compatibility_hash: vllm: malformed message: at byte 20: want a string, got binary (0xc4)"},
 ],
 "handshake_payloads": [
   {"name": "ex1_hash_around_facts_2_3", "compatibility_hash": want["ex1_pull_hma"],
    "agent_metadata_hex": ex1hex, "hex": payload(want["ex1_pull_hma"], ex1hex)},
   {"name": "shuffled_with_unknown_key", "compatibility_hash": want["ex1_pull_hma"], "agent_metadata_hex": ex1hex, "decode_only": True,
    "hex": "83" + fixstr("agent_metadata_bytes") + "c5%04x" % (len(ex1hex)//2) + ex1hex + fixstr("extra") + "92c0c3" + fixstr("compatibility_hash") + "d940" + h(want["ex1_pull_hma"])},
 ],
}
print(json.dumps(out, indent=1))
