#!/usr/bin/python3
"""End-to-end `ztrain train` on generated data:
- determinism: one spec and seed give bit-identical losses in two runs (and a different seed does not);
- metrics.jsonl has the documented train/eval records, config.resolved.toml is complete and reloads;
- the loss falls;
- bad input (each kind of bad spec, a missing or corrupt dataset, bad CLI) exits 2 with one message
  naming the file and key, never a crash or a stack trace;
- out_dir is never clobbered: a file there, the run's own config.resolved.toml given as the spec,
  and a second run into an out_dir another run holds each exit 2 (the last naming the holder's pid).
"""
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import testlib  # noqa: E402

failures, expect = testlib.checks()


def base_spec(work, data, out="run", **over):
    spec = {
        "run": {"name": "e2e", "out_dir": os.path.join(work, out), "seed": 42, "device": "cpu", "threads": 2},
        "model": {"n_layer": 2, "n_head": 2, "d_model": 32, "vocab_size": 257, "seq_len": 32},
        "train": {"micro_batch": 4, "global_batch": 8, "max_steps": 30, "log_every": 5, "eval_every": 10,
                  "eval_steps": 2},
        "optim": {"lr": 3e-3, "min_lr": 3e-4, "warmup_steps": 5},
        "data": {"train": data, "val": data},
    }
    return testlib.with_overrides(spec, over)


def train(args, work, name, spec, extra=()):
    path = os.path.join(work, name + ".toml")
    testlib.write_spec(path, spec)
    return testlib.run([args.ztrain, "train", path, *extra], check=False), path


def check_bad(args, work, data, name, text_edit, needle, extra=()):
    """Writes a spec with text_edit(spec_text) applied; expects exit 2 and `needle` in stderr."""
    path = os.path.join(work, name + ".toml")
    testlib.write_spec(path, base_spec(work, data))
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(text_edit(text))
    p = testlib.run([args.ztrain, "train", path, *extra], check=False)
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    ok = p.returncode == 2 and needle in p.stderr and len(lines) == 1 and "Traceback" not in p.stderr
    expect(ok, f"bad spec '{name}': expected exit 2 and one line containing {needle!r}; "
               f"got {p.returncode}: {p.stderr.strip()!r}")


def main():
    args = testlib.arg_parser().parse_args()
    with tempfile.TemporaryDirectory() as work:
        data = testlib.make_byte_dataset(args.tokenize, os.path.join(work, "data"), 30000, 5)

        # --- determinism and outputs
        p1, spec_path = train(args, work, "a", base_spec(work, data, "run_a"))
        p2, _ = train(args, work, "b", base_spec(work, data, "run_b"))
        expect(p1.returncode == 0 and p2.returncode == 0, f"training failed: {p1.stderr}{p2.stderr}")
        r1, r2 = (testlib.metrics(os.path.join(work, d), kind=None) for d in ("run_a", "run_b"))
        l1 = [r["loss"] for r in r1 if r["kind"] == "train"]
        l2 = [r["loss"] for r in r2 if r["kind"] == "train"]
        expect(l1 == l2 and len(l1) == 7, f"two runs with one seed differ: {l1} vs {l2}")
        v1 = [r["val_loss"] for r in r1 if r["kind"] == "eval"]
        expect(v1 == [r["val_loss"] for r in r2 if r["kind"] == "eval"] and len(v1) == 3,
               f"eval records differ or missing: {v1}")
        print(f"determinism: {len(l1)} logged losses bit-identical across two runs ({l1[0]:.6f} -> {l1[-1]:.6f})")
        expect(l1[-1] < l1[0] - 0.5, f"loss did not fall: {l1}")
        tr = [r for r in r1 if r["kind"] == "train"][0]
        for key in ("step", "loss", "lr", "grad_norm", "tokens_per_s", "step_ms"):
            expect(key in tr, f"train record lacks {key}: {tr}")
        ev = [r for r in r1 if r["kind"] == "eval"][0]
        expect(set(ev) >= {"kind", "step", "val_loss"}, f"eval record: {ev}")
        p3, _ = train(args, work, "c", base_spec(work, data, "run_c", run__seed=43))
        expect(p3.returncode == 0, f"run with seed 43: exit {p3.returncode}: {p3.stderr[-800:]}")
        l3 = [r["loss"] for r in testlib.metrics(os.path.join(work, "run_c"))]
        expect(l3 != l1, "a different seed gave the same losses")
        # resolved spec: complete and loadable
        resolved = os.path.join(work, "run_a", "config.resolved.toml")
        text = open(resolved).read()
        for key in ("d_ff = 128", "schedule = \"cosine\"", "beta2 = 0.95", "eval_steps = 2"):
            expect(key in text, f"config.resolved.toml lacks {key!r}")
        chk = testlib.run([args.ztrain, "check", resolved], check=False)
        expect(chk.returncode == 0 and chk.stdout == text, "config.resolved.toml does not reload to itself")
        # an earlier run's metrics are kept, not overwritten
        p4, _ = train(args, work, "a2", base_spec(work, data, "run_a", train__max_steps=2))
        expect(p4.returncode == 0, f"second run into run_a: exit {p4.returncode}: {p4.stderr[-800:]}")
        expect(os.path.exists(os.path.join(work, "run_a", "metrics.1.jsonl")), "previous metrics.jsonl was not kept")

        # --- bad specs: exit 2, one line, file + key named
        check_bad(args, work, data, "unknown_key", lambda t: t.replace("lr = 0.003", "lrr = 0.003"),
                  "unknown key [optim] lrr (did you mean 'lr'?)")
        check_bad(args, work, data, "wrong_type", lambda t: t.replace("n_layer = 2", "n_layer = \"2\""),
                  "wrong_type.toml:9: [model] n_layer must be an integer")
        check_bad(args, work, data, "missing", lambda t: t.replace("seq_len = 32\n", ""),
                  "missing required key [model] seq_len")
        check_bad(args, work, data, "not_divisible", lambda t: t.replace("d_model = 32", "d_model = 33"),
                  "d_model = 33 is not divisible by n_head = 2")
        check_bad(args, work, data, "batch_multiple", lambda t: t.replace("global_batch = 8", "global_batch = 10"),
                  "global_batch = 10 is not a multiple of micro_batch = 4")
        check_bad(args, work, data, "negative_lr", lambda t: t.replace("lr = 0.003", "lr = -0.003"),
                  "[optim] lr: must be >= 0")
        check_bad(args, work, data, "syntax", lambda t: t.replace("[optim]", "[optim"), "TOML syntax error")
        check_bad(args, work, data, "set_unknown", lambda t: t, "--set optim.lrr: unknown key", ("--set", "optim.lrr=1"))
        check_bad(args, work, data, "set_type", lambda t: t, "--set model.n_head", ("--set", "model.n_head=x"))
        check_bad(args, work, data, "vocab_small", lambda t: t.replace("vocab_size = 257", "vocab_size = 100"),
                  "has 257 tokens but [model] vocab_size is 100")
        check_bad(args, work, data, "no_data", lambda t: t.replace(data, data + "_missing"), "cannot open dataset manifest")
        # corrupt shard: one flipped byte is caught by the manifest's CRC
        bad = os.path.join(work, "bad_data")
        shutil.copytree(data, bad)
        shard = os.path.join(bad, "shard_00000.ztok")
        with open(shard, "r+b") as f:
            f.seek(1000)
            b = f.read(1)
            f.seek(1000)
            f.write(bytes([b[0] ^ 0x01]))
        check_bad(args, work, data, "corrupt", lambda t: t.replace(data, bad), "CRC-32 does not match")
        # truncated shard
        with open(shard, "r+b") as f:
            f.truncate(500)
        check_bad(args, work, data, "truncated", lambda t: t.replace(data, bad), "truncated or corrupt")
        # a model that cannot fit: exit 2 before anything is allocated, with the bytes needed and
        # available (the memory plan), not the OOM killer
        path = os.path.join(work, "huge.toml")
        testlib.write_spec(path, base_spec(work, data, model__n_layer=4000, model__d_model=4096, model__n_head=32))
        p = testlib.run([args.ztrain, "train", path], check=False)
        expect(p.returncode == 2 and "this spec needs at least" in p.stderr and "bytes needed" in p.stderr,
               f"huge model: expected exit 2 with the memory needed, got {p.returncode}: {p.stderr!r}")
        # out_dir safety: a file there, the run's own resolved spec as input, two runs at once
        blocker = os.path.join(work, "a_file")
        open(blocker, "w").write("not a directory")
        path = os.path.join(work, "outfile.toml")
        testlib.write_spec(path, base_spec(work, data, run__out_dir=blocker))
        p = testlib.run([args.ztrain, "train", path], check=False)
        expect(p.returncode == 2 and "[run] out_dir" in p.stderr and "is a file" in p.stderr,
               f"out_dir is a file: exit {p.returncode}: {p.stderr!r}")
        before = open(resolved).read()
        p = testlib.run([args.ztrain, "train", resolved], check=False)
        expect(p.returncode == 2 and "config.resolved.toml" in p.stderr and open(resolved).read() == before,
               f"training from the run's own config.resolved.toml: exit {p.returncode}: {p.stderr!r}")
        path = os.path.join(work, "long.toml")
        testlib.write_spec(path, base_spec(work, data, out="busy", train__max_steps=100000, train__log_every=1))
        first = subprocess.Popen([args.ztrain, "train", path], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                 text=True)
        first.stdout.readline()  # it is training: out_dir is claimed
        p = testlib.run([args.ztrain, "train", path], check=False)
        first.kill()
        first.communicate()
        expect(p.returncode == 2 and f"pid {first.pid}" in p.stderr and "in use" in p.stderr,
               f"second run into a busy out_dir: exit {p.returncode}: {p.stderr!r}")
        print(f"out_dir in use: exit {p.returncode}: {p.stderr.strip()}")
        # CLI errors
        for argv, needle in ([["train", os.path.join(work, "nope.toml")], "cannot open run spec"],
                             [["frobnicate", spec_path], "unknown command"],
                             [["train"], "missing SPEC.toml"],
                             [["train", spec_path, "--bogus"], "unknown option --bogus"]):
            p = testlib.run([args.ztrain, *argv], check=False)
            expect(p.returncode == 2 and needle in p.stderr, f"ztrain {argv}: expected exit 2 with {needle!r}, got {p.returncode}: {p.stderr!r}")
    return testlib.report(failures, "deterministic training, complete outputs, and exit 2 with a named key for every bad input")


if __name__ == "__main__":
    sys.exit(main())
