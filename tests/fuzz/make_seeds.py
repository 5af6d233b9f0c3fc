#!/usr/bin/env python3
"""Writes the fuzzers' seed corpora into tests/fuzz/corpus/{run_spec,manifest,shard_header,safetensors}.

One valid input alone lets a fuzzer reach only the first checks: a mutation that breaks an early
rule never gets to the later ones. So each corpus holds a valid input that sets every field, plus
one input per rule that is valid except for breaking that rule, so every rejection branch starts
covered and the fuzzer mutates from there. Run it again after adding a key or a rule; the files are
committed so the fuzz run does not depend on this script.
"""
import json
import os
import struct
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")

# Every run spec key, with a valid value (engine/config/spec_schema.cpp).
FULL = {
    "run": {"name": '"full"', "out_dir": '"runs/full"', "seed": "-7", "device": '"cpu"', "threads": "2"},
    "model": {"arch": '"gpt2"', "n_layer": "2", "n_head": "4", "d_model": "64", "d_ff": "128",
              "vocab_size": "259", "vocab_multiple": "64", "seq_len": "32"},
    "train": {"micro_batch": "2", "global_batch": "8", "max_steps": "10", "log_every": "1",
              "eval_every": "5", "eval_steps": "2", "sample_tokens": "16", "sample_temperature": "0.8"},
    "optim": {"lr": "3e-4", "min_lr": "3e-5", "warmup_steps": "2", "schedule": '"linear"',
              "weight_decay": "0.1", "beta1": "0.9", "beta2": "0.95", "eps": "1e-8", "grad_clip": "1.0"},
    "precision": {"compute": '"fp16"', "loss_scale": "0", "initial_scale": "65536.0",
                  "scale_window": "100", "min_scale": "1.0"},
    "parallel": {"tensor": "2", "zero_stage": "3", "bucket_mb": "25", "prefetch": "1"},
    "comm": {"backend": '"mpi"', "timeout_s": "60", "nccl_algo": '"Ring"', "nccl_proto": '"Simple"'},
    "data": {"train": '"s3://bucket/train"', "val": '"s3://bucket/val"', "cache_dir": '"/tmp/c"',
             "cache_limit": '"1.5 GiB"', "prefetch": "2", "shuffle_block": "4", "retries": "3",
             "timeout_s": "10", "s3_endpoint": '"http://127.0.0.1:9000"', "s3_region": '"us-east-1"',
             "s3_path_style": "true", "s3_access_key_id": '"AKIA"', "s3_secret_access_key": '"s"',
             "s3_session_token": '"t"'},
}

# One broken rule each: (name, section, key, value); value None deletes the key.
SPEC_BREAKS = [
    ("missing_required", "model", "n_layer", None), ("unknown_key_typo", "optim", "betta2", "0.9"),
    ("key_in_other_section", "train", "lr", "1e-3"), ("wrong_type_int", "model", "n_head", '"4"'),
    ("wrong_type_float", "optim", "lr", '"fast"'), ("wrong_type_bool", "data", "s3_path_style", "1"),
    ("wrong_type_string", "run", "device", "1"), ("negative_count", "train", "max_steps", "-1"),
    ("huge_int", "model", "d_model", "4294967296"), ("nan", "optim", "lr", "nan"),
    ("inf", "optim", "eps", "inf"), ("bad_device", "run", "device", '"tpu"'),
    ("empty_out_dir", "run", "out_dir", '""'), ("bad_arch", "model", "arch", '"bert"'),
    ("zero_layers", "model", "n_layer", "0"), ("zero_heads", "model", "n_head", "0"),
    ("head_split", "model", "d_model", "66"), ("tiny_vocab", "model", "vocab_size", "1"),
    ("zero_vocab_multiple", "model", "vocab_multiple", "0"),
    ("zero_seq", "model", "seq_len", "0"), ("zero_micro", "train", "micro_batch", "0"),
    ("batch_multiple", "train", "global_batch", "7"), ("zero_log", "train", "log_every", "0"),
    ("zero_eval_steps", "train", "eval_steps", "0"), ("cold", "train", "sample_temperature", "0.0"),
    ("tokens_overflow", "model", "seq_len", "2000000000"), ("negative_lr", "optim", "lr", "-1.0"),
    ("min_lr_above", "optim", "min_lr", "1.0"), ("bad_schedule", "optim", "schedule", '"step"'),
    ("negative_wd", "optim", "weight_decay", "-0.1"), ("beta1_one", "optim", "beta1", "1.0"),
    ("beta2_neg", "optim", "beta2", "-0.5"), ("zero_eps", "optim", "eps", "0.0"),
    ("negative_clip", "optim", "grad_clip", "-1.0"), ("empty_train", "data", "train", '""'),
    ("bad_compute", "precision", "compute", '"fp8"'), ("negative_scale", "precision", "loss_scale", "-2.0"),
    ("zero_min_scale", "precision", "min_scale", "0.0"), ("initial_below_min", "precision", "initial_scale", "0.5"),
    ("zero_window", "precision", "scale_window", "0"), ("zero_tensor", "parallel", "tensor", "0"),
    ("zero_stage_4", "parallel", "zero_stage", "4"), ("zero_bucket", "parallel", "bucket_mb", "0"),
    ("tensor_heads", "parallel", "tensor", "3"), ("bad_comm", "comm", "backend", '"gloo"'),
    ("zero_comm_timeout", "comm", "timeout_s", "0"), ("bad_cache_limit", "data", "cache_limit", '"lots"'),
    ("zero_shuffle", "data", "shuffle_block", "0"), ("zero_data_timeout", "data", "timeout_s", "0"),
    ("many_retries", "data", "retries", "101"),
]


def toml(spec):
    out = []
    for sec, keys in spec.items():
        out.append(f"[{sec}]")
        out += [f"{k} = {v}" for k, v in keys.items()]
        out.append("")
    return "\n".join(out)


def write(kind, name, data):
    d = os.path.join(ROOT, kind)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def spec_seeds():
    write("run_spec", "full.toml", toml(FULL))
    llama = {s: dict(k) for s, k in FULL.items()}
    llama["model"].update(arch='"llama"', n_kv_head="2", rope_theta="500000.0", norm_eps="1e-6",
                          tie_embeddings="false")
    write("run_spec", "full_llama.toml", toml(llama))
    for name, key, value in [("kv_heads", "n_kv_head", "3"), ("odd_head", "d_model", "36"),
                             ("theta", "rope_theta", "0.5"), ("eps", "norm_eps", "0.0")]:
        broken = {s: dict(k) for s, k in llama.items()}
        broken["model"][key] = value
        write("run_spec", f"break_llama_{name}.toml", toml(broken))
    write("run_spec", "size_units.toml", toml(FULL).replace('"1.5 GiB"', '"512 kib"'))
    for name, sec, key, value in SPEC_BREAKS:
        spec = {s: dict(k) for s, k in FULL.items()}
        if value is None: del spec[sec][key]
        else: spec[sec][key] = value
        write("run_spec", f"break_{name}.toml", toml(spec))
    # TOML forms the loader must handle: inline and dotted tables, an unknown section, a table as a
    # value, a syntax error, non-ASCII outside and inside strings.
    write("run_spec", "dotted.toml", 'model.n_layer = 1\nmodel = { n_head = 1 }\n')
    write("run_spec", "unknown_section.toml", toml(FULL) + "[optimizer]\nlr = 1.0\n")
    write("run_spec", "section_not_table.toml", 'run = 3\n')
    write("run_spec", "syntax.toml", '[model\nn_layer = = 2\n')
    write("run_spec", "non_ascii.toml", toml(FULL).replace('"full"', '"f\u00fcll"') + "# \u00e9\n")
    # keys at and past the pre-scan's limits (8 dotted parts, 256 characters), in headers, dotted
    # keys and inline tables, with strings and comments the scan must step over
    write("run_spec", "key_limits.toml", '[a.b.c.d.e.f.g.h]\nx = "a.b.c.d.e.f.g.h.i.j" # a.b.c.d.e.f.g.h.i\n'
          '[run]\ny = { p.q.r = 1, s = [1.5, { t.u = 2 }] }\n')
    write("run_spec", "break_deep_key.toml", "[run]\n" + ".".join("k" * 9) + " = 1\n")
    write("run_spec", "break_long_key.toml", "[run]\n" + "k" * 257 + " = 1\n")


MANIFEST = {
    "format": "ztrain-shards", "version": 1, "token_bytes": 4,
    "tokenizer": {"kind": "bpe", "name": "cl100k_base", "n_vocab": 100277, "eot": 100257,
                  "vocab_file": "cl100k_base.tiktoken"},
    "shards": [{"file": f"shard_{i:05d}.ztok", "tokens": 1000 * (i + 1), "documents": i + 1,
                "bytes": 64 + 4 * 1000 * (i + 1), "crc32": 12345 + i} for i in range(3)],
    "total_tokens": 6000, "total_documents": 6,
}

MANIFEST_BREAKS = [
    ("format", lambda m: m.update(format="other")), ("version", lambda m: m.update(version=2)),
    ("token_bytes", lambda m: m.update(token_bytes=3)), ("kind", lambda m: m["tokenizer"].update(kind="wordpiece")),
    ("n_vocab_zero", lambda m: m["tokenizer"].update(n_vocab=0)), ("eot", lambda m: m["tokenizer"].update(eot=100277)),
    ("two_byte_vocab", lambda m: m.update(token_bytes=2)), ("vocab_file_type", lambda m: m["tokenizer"].update(vocab_file=3)),
    ("shards_empty", lambda m: m.update(shards=[])), ("shard_path", lambda m: m["shards"][1].update(file="../x")),
    ("shard_abs", lambda m: m["shards"][1].update(file="/etc/x")), ("crc_big", lambda m: m["shards"][2].update(crc32=1 << 33)),
    ("bytes", lambda m: m["shards"][0].update(bytes=5)), ("negative", lambda m: m["shards"][0].update(tokens=-1)),
    ("missing", lambda m: m["shards"][0].pop("documents")), ("string_int", lambda m: m.update(version="1")),
]


def manifest_seeds():
    write("manifest", "bpe_three_shards.json", json.dumps(MANIFEST, indent=1))
    for name, breaker in MANIFEST_BREAKS:
        m = json.loads(json.dumps(MANIFEST))
        breaker(m)
        write("manifest", f"break_{name}.json", json.dumps(m))
    write("manifest", "not_object.json", "[1, 2]")
    write("manifest", "not_json.json", '{"format": ')


def shard(token_bytes, tokens, documents, version=1, magic=b"ZTOKSHRD", n_tokens=None):
    head = magic + struct.pack("<IIQQ", version, token_bytes, len(tokens) if n_tokens is None else n_tokens, documents)
    head += bytes(64 - len(head))
    body = b"".join(struct.pack("<H" if token_bytes == 2 else "<I", t) for t in tokens)
    return head + body


def document_shard(token_bytes, tokens, starts, loss):
    """Version 2 (fine-tuning): the tokens padded to 8 bytes, the document starts, the loss bits."""
    data = shard(token_bytes, tokens, len(starts), version=2)
    data += bytes(-len(data) % 8) + b"".join(struct.pack("<Q", s) for s in starts)
    return data + bytes(sum(loss[i] << (i % 8) for i in range(j, min(j + 8, len(loss)))) for j in range(0, len(loss), 8))


def shard_seeds():
    write("shard_header", "four_byte_tokens.bin", shard(4, [100257, 7, 99999], 2))
    write("shard_header", "empty_body.bin", shard(2, [], 0))
    write("shard_header", "wrong_magic.bin", shard(2, [1], 1, magic=b"ZTOKSHRX"))
    write("shard_header", "wrong_version.bin", shard(2, [1], 1, version=3))
    write("shard_header", "documents_v2.bin", document_shard(2, [5, 6, 7, 8, 9], [0, 3], [0, 1, 1, 0, 1]))
    write("shard_header", "documents_v2_cut.bin", document_shard(2, [5, 6, 7], [0], [0, 1, 1])[:-1])
    write("shard_header", "width_three.bin", shard(3, [], 1))
    write("shard_header", "count_overflow.bin", shard(4, [1, 2], 1, n_tokens=(1 << 62) + 2))
    write("shard_header", "short.bin", b"ZTOKSHRD\x01\x00")


def safetensors(header, data=b"", raw_len=None):
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h) if raw_len is None else raw_len) + h + data


def safetensors_seeds():
    good = {"__metadata__": {"format": "pt"},
            "a.weight": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
            "b.weight": {"dtype": "BF16", "shape": [4], "data_offsets": [24, 32]},
            "c": {"dtype": "F16", "shape": [], "data_offsets": [32, 34]}}
    write("safetensors", "three_dtypes.bin", safetensors(good, bytes(34)))
    breaks = {
        "dtype_i64": ("a.weight", "dtype", "I64"), "shape_neg": ("a.weight", "shape", [-1, 3]),
        "shape_size": ("a.weight", "shape", [3, 3]), "offsets_out": ("b.weight", "data_offsets", [24, 99]),
        "offsets_reversed": ("b.weight", "data_offsets", [32, 24]), "overlap": ("b.weight", "data_offsets", [20, 28]),
        "offsets_short": ("c", "data_offsets", [32]), "metadata_int": ("__metadata__", "format", 1),
    }
    for name, (tensor, field, value) in breaks.items():
        h = json.loads(json.dumps(good))
        h[tensor][field] = value
        write("safetensors", f"break_{name}.bin", safetensors(h, bytes(34)))
    write("safetensors", "header_too_long.bin", safetensors(good, bytes(34), raw_len=1 << 40))
    write("safetensors", "not_json.bin", struct.pack("<Q", 5) + b"{\"a\":")
    write("safetensors", "short.bin", b"\x05\x00")


if __name__ == "__main__":
    safetensors_seeds()
    spec_seeds()
    manifest_seeds()
    shard_seeds()
    print(f"seeds written under {ROOT}", file=sys.stderr)
