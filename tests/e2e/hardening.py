#!/usr/bin/python3
"""Hardening (issue 17): each defect a hostile new user found, reproduced and checked fixed.
Numbers are the issue's items. Multi-rank cases run under mpirun; a rank gets its own arguments
through a wrapper script, as a site's launcher wrapper might give them.
"""
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import testlib  # noqa: E402

failures, expect = testlib.checks()


def write(work, name, data, out="run", **over):
    """work/name.toml: a 1-layer model training 3 steps into work/out, with section__key overrides."""
    return testlib.tiny_spec(os.path.join(work, name + ".toml"), os.path.join(work, out), data, seed=42,
                             model={"n_layer": 1, "n_head": 2, "d_model": 16, "vocab_size": 258, "seq_len": 16},
                             train={"micro_batch": 2, "global_batch": 4, "max_steps": 3, "log_every": 1},
                             optim={"lr": 1e-3}, **over)


def error_lines(p):
    return [l for l in p.stderr.splitlines() if l.startswith("ztrain")]


def rank_wrapper(work, ztrain, rank, extra):
    """A launcher wrapper that passes `extra` arguments to one rank only."""
    path = os.path.join(work, f"wrap_rank{rank}_{abs(hash(tuple(extra)))}.sh")
    with open(path, "w") as f:
        f.write("#!/bin/sh\n"
                f'if [ "$OMPI_COMM_WORLD_RANK" = "{rank}" ]; then exec {ztrain} "$@" {" ".join(extra)}; fi\n'
                f'exec {ztrain} "$@"\n')
    os.chmod(path, 0o755)
    return path


def mpirun(np_, cmd, timeout=90):
    t0 = time.time()
    try:
        p = subprocess.run([*testlib.mpirun(np_), *cmd], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        return None, time.time() - t0
    return p, time.time() - t0


def multi_rank(args, work, data):
    # 1. a spec error on one rank only: every rank ends, exit 2, the error printed once with its rank
    spec = write(work, "mr", data, "mr_run")
    for extra, needle in ((["--set", "model.n_layer=0"], "[model] n_layer: must be >= 1"),
                          (["--set", "optim.lr=nan"], "[optim] lr"),
                          (["--bogus"], "unknown option --bogus"),
                          (["--set", "nosuch.key=1"], "unknown section [nosuch]")):
        p, secs = mpirun(2, [rank_wrapper(work, args.ztrain, 1, extra), "train", spec])
        if p is None:
            expect(False, f"1: {extra} on rank 1 only: the job hung ({secs:.0f} s)")
            continue
        lines = error_lines(p)
        expect(p.returncode == 2 and len(lines) == 1 and "rank 1:" in lines[0] and needle in lines[0],
               f"1: {extra} on rank 1 only: expected exit 2 and one line naming rank 1 and {needle!r}; "
               f"got {p.returncode} in {secs:.1f} s: {p.stderr.strip()[-600:]!r}")
    print("1: an error on one rank ends the job with exit 2 and one message naming the rank")

    # 2. different valid specs on the ranks: exit 2 naming the first differing key and both values
    for extra, needle in ((["--set", "run.seed=43"], "[run] seed = 43 on rank 1, 42 on rank 0"),
                          (["--set", "optim.lr=0.002"], "[optim] lr = 0.002 on rank 1, 0.001 on rank 0"),
                          (["--set", "model.n_layer=2"], "[model] n_layer = 2 on rank 1, 1 on rank 0"),
                          (["--set", f"data.train={data}/"], "[data] train")):
        p, secs = mpirun(2, [rank_wrapper(work, args.ztrain, 1, extra), "train", spec])
        if p is None:
            expect(False, f"2: {extra} on rank 1 only: the job hung")
            continue
        lines = error_lines(p)
        expect(p.returncode == 2 and len(lines) == 1 and needle in lines[0],
               f"2: {extra} on rank 1 only: expected exit 2 and one line with {needle!r}; "
               f"got {p.returncode}: {p.stderr.strip()[-600:]!r}")
    print("2: ranks started with different specs exit 2 naming the key and both values")

    # 18 (last part): an error every rank finds alike is printed once, not once per rank
    bad = write(work, "gb", data, "gb_run")  # global batch 4, 3 ranks x 2
    p, _ = mpirun(3, [args.ztrain, "train", bad])
    lines = error_lines(p) if p else []
    expect(p is not None and p.returncode == 2 and len(lines) == 1 and "global_batch" in lines[0],
           f"18: the global_batch error under 3 ranks: expected one line; got "
           f"{p.returncode if p else 'hang'}: {p.stderr if p else ''!r}")


def run(cmd, timeout=120, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)


def expect_exit(p, code, needle, what):
    lines = error_lines(p)
    expect(p.returncode == code and len(lines) == 1 and needle in lines[0] and "Traceback" not in p.stderr,
           f"{what}: expected exit {code} and one line containing {needle!r}; got {p.returncode}: "
           f"{p.stderr.strip()[-600:]!r}")


def file_size_limit(limit):
    """preexec_fn: writes past `limit` bytes fail with EFBIG, as on a full disk."""
    def apply():
        import resource
        import signal
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # fail the write instead of killing the process
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def spec_items(args, work, data):
    z = args.ztrain
    ok = write(work, "ok", data)
    # 3. keys nested tens of thousands deep (a stack overflow in toml++ before) and over-long keys
    deep = {"deep_header": "[" + "a." * 50000 + "b]\nx = 1\n",
            "deep_dotted_key": "[run]\n" + ".".join(["k"] * 50000) + " = 1\n",
            "deep_numeric_key": "[run]\n" + "1." * 50000 + "1 = 1\n",
            "deep_inline_key": "[run]\nx = {" + ".".join(["k"] * 50000) + " = 1}\n"}
    for name, text in deep.items():
        path = os.path.join(work, name + ".toml")
        with open(path, "w") as f:
            f.write(text)
        expect_exit(run([z, "check", path]), 2, "more than 8 dotted parts", f"3: {name}")
    long_key = os.path.join(work, "long_key.toml")
    with open(long_key, "w") as f:
        f.write("[run]\n" + "k" * 300 + " = 1\n")
    expect_exit(run([z, "check", long_key]), 2, "a key longer than 256 characters", "3: long key")
    expect_exit(run([z, "check", ok, "--set", "run.name={" + ".".join(["a"] * 50000) + "=1}"]), 2,
                "more than 8 dotted parts", "3: deep key in a --set value")
    print("3: deeply nested and over-long keys exit 2 before parsing")

    # 4. a spec far larger than memory fails at once with the bytes needed and available (it used to
    # be killed by the OOM killer after 25 s, or fail with exit 1 after allocating 9 GB)
    for key, value in (("model.n_layer", "100000000"), ("model.vocab_size", "2000000000"),
                       ("train.micro_batch", "1000000")):
        t0 = time.time()
        p = run([z, "train", ok, "--set", f"{key}={value}", "--set", "train.global_batch=1000000"], timeout=60)
        expect_exit(p, 2, "this spec needs at least", f"4: {key} = {value}")
        expect("bytes needed" in p.stderr and time.time() - t0 < 30, f"4: {key}: {p.stderr[-300:]!r}")
    print("4: specs larger than memory exit 2 before allocating")

    # 9. a directory where a file is expected
    expect_exit(run([z, "check", work]), 2, "is a directory", "9: ztrain check DIR")
    expect_exit(run([z, "debug", "dump-state", ok, "--out", work]), 2, "is a directory", "9: dump-state --out DIR")
    expect_exit(run([args.tokenize, "encode", "--vocab", "byte", work]), 2, "is a directory", "9: encode DIR")
    expect_exit(run([args.tokenize, "shards", "--vocab", "byte", "--out", os.path.join(work, "ds9"), data]), 2,
                "is a directory", "9: shards DIR")
    print("9: a directory given for a file exits 2")

    # 15. counts on command lines are parsed strictly
    # beside ztrain in the build's bin/ (a path joined, not rewritten: a checkout may be named ztrain)
    bench_data = os.path.join(os.path.dirname(os.path.abspath(args.ztrain)), "ztrain-bench-data")
    for bad in ("abc", "0", "-5", "1e3", "10xyz"):
        expect_exit(run([bench_data, ok, "--batches", bad]), 2,
                    f"--batches: expected a whole number", f"15: --batches {bad}")
    expect_exit(run([z, "debug", "dump-state", ok, "--out", os.path.join(work, "x.h5"), "--steps", "1e3"]), 2,
                "--steps: expected a whole number", "15: --steps 1e3")
    expect_exit(run([args.tokenize, "bench", "--vocab", "byte", "--repeats", "x", ok]), 2,
                "--repeats: expected a whole number", "15: --repeats x")
    print("15: bad counts on command lines exit 2")

    # 16. a fixed fp16 loss scale that overflows stops (it used to skip every step and exit 0)
    p = run([z, "train", write(work, "scale", data, "scale_run", precision__compute="fp16",
                               precision__loss_scale=1e30)])
    expect_exit(p, 1, "overflow at the fixed loss scale", "16: loss_scale = 1e30")
    print("16: an overflowing fixed loss scale exits 1")

    # (also asked) a run without checkpoints interrupted by a signal says at which step
    import signal
    proc = subprocess.Popen([z, "train", ok, "--set", "train.max_steps=1000000", "--set", "train.log_every=1",
                             "--set", f"run.out_dir={os.path.join(work, 'intr_run')}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.readline()  # the first progress line: training is under way
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    expect(proc.returncode == 128 + signal.SIGINT and "interrupted by SIGINT during step" in err,
           f"interrupt: exit {proc.returncode}: {err[-300:]!r}")
    print("interrupt: a run without checkpoints names the step it was stopped in")

    # 17. dump-state leaves no .tmp beside its target when it fails; out_dir on a full disk names
    # the reason and leaves no .tmp
    target = os.path.join(work, "no_such_dir", "state.h5")
    expect_exit(run([z, "debug", "dump-state", ok, "--out", target]), 2, "is not an existing directory",
                "17: dump-state --out in a missing directory")
    out = os.path.join(work, "full_run")
    p = run([z, "train", ok, "--set", f"run.out_dir={out}"], preexec_fn=file_size_limit(1000))
    expect_exit(p, 1, "cannot write: File too large", "18: a full disk at start")
    leftovers = [f for f in os.listdir(out) if f.endswith(".tmp")] if os.path.isdir(out) else []
    expect(not leftovers, f"18: a failed write left {leftovers}")
    print("17, 18: failed writes name the reason and leave no .tmp")


def tokenizer_items(args, work, data):
    t = args.tokenize
    # 18. an unknown command is named (it used to say "--vocab is required")
    expect_exit(run([t, "frobnicate"]), 2, "unknown command 'frobnicate'", "18: ztrain-tokenize frobnicate")

    # 14. an encoding error names the file when several are given
    good, bad = os.path.join(work, "good.txt"), os.path.join(work, "bad.txt")
    with open(good, "w") as f:
        f.write("good text\n")
    with open(bad, "wb") as f:
        f.write(b"ok \xff\xfe broken")
    vocab = make_small_tiktoken(work)
    for threads in ("1", "2"):
        expect_exit(run([t, "shards", "--vocab", vocab, "--threads", threads, "--out", os.path.join(work, "d14"),
                         good, bad]), 2, f"{bad}: ", f"14: bad UTF-8 in the second file ({threads} threads)")
    print("14: an encoding error names its file")

    # 11. a failed rebuild (bad input, a full disk) leaves the previous dataset whole
    ds = os.path.join(work, "ds11")
    testlib.run([t, "shards", "--vocab", "byte", "--out", ds, "--shard-tokens", "4", good])
    before = {f: open(os.path.join(ds, f), "rb").read() for f in os.listdir(ds)}
    big = os.path.join(work, "big.txt")
    with open(big, "w") as f:
        f.write(testlib.generated_text(3000, 1))
    p = run([t, "shards", "--vocab", vocab, "--out", ds, "--shard-tokens", "4", big, bad])
    expect(p.returncode == 2, f"11: rebuild with a bad file: exit {p.returncode}")
    p = run([t, "shards", "--vocab", "byte", "--out", ds, "--shard-tokens", "1000", big],
            preexec_fn=file_size_limit(1500))
    expect(p.returncode == 1 and "File too large" in p.stderr, f"11: rebuild on a full disk: {p.returncode} {p.stderr!r}")
    after = {f: open(os.path.join(ds, f), "rb").read() for f in os.listdir(ds)}
    expect(after == before, f"11: the previous dataset changed: {sorted(before)} -> {sorted(after)}")
    expect(not [f for f in os.listdir(work) if ".building-" in f], "11: a failed build was left behind")
    p = run([t, "shards", "--vocab", "byte", "--out", ds, big])
    expect(p.returncode == 0 and sorted(os.listdir(ds)) == ["manifest.json", "shard_00000.ztok"],
           f"11: a rebuild did not replace the dataset: {p.stderr} {os.listdir(ds)}")
    expect_exit(run([t, "shards", "--vocab", "byte", "--out", work, good]), 2, "not part of a dataset",
                "11: --out holding other files")
    print("11: a failed rebuild leaves the previous dataset whole; a rebuild replaces it")

    # 10. rank files checked as tiktoken's loader checks them
    lines = open(vocab).read().splitlines()
    meta = json.load(open(vocab.replace(".tiktoken", ".meta.json")))
    cases = {
        "truncated": (lines[:-1], meta, '"n_vocab" is 259, but'),
        "duplicate_rank": (lines + [lines[-1].split()[0][:-4] + "aGk= 256"], meta, "rank 256 is given twice"),
        "special_collides": (lines, {**meta, "special_tokens": {"<|endoftext|>": 257}},
                             "already gives to a normal token"),
        "n_vocab_disagrees": (lines, {**meta, "n_vocab": 300}, '"n_vocab" is 300'),
        "special_twice": (lines, {**meta, "special_tokens": {"<|endoftext|>": 258, "<|x|>": 258}, "n_vocab": 260},
                          "share id 258"),
    }
    for name, (rank_lines, m, needle) in cases.items():
        path = os.path.join(work, f"bad_{name}.tiktoken")
        with open(path, "w") as f:
            f.write("\n".join(rank_lines) + "\n")
        with open(path.replace(".tiktoken", ".meta.json"), "w") as f:
            json.dump(m, f)
        expect_exit(run([t, "encode", "--vocab", path, good]), 2, needle, f"10: {name}")
    expect(run([t, "encode", "--vocab", vocab, good]).returncode == 0, "10: the valid small vocabulary was rejected")
    print("10: truncated, duplicate, colliding and mismatched vocabularies exit 2")


def data_items(args, work, data):
    # 13. a manifest over HTTP claiming 2^40 tokens: exit 2 at once (it used 17 GB and 60 s), from
    # one HEAD of the largest declared shard
    served = os.path.join(work, "served")
    shutil.copytree(data, served)
    mpath = os.path.join(served, "manifest.json")
    m = json.load(open(mpath))
    header = m["shards"][0]["bytes"] - m["shards"][0]["tokens"] * m["token_bytes"]
    m["shards"][0]["tokens"] = 2 ** 40
    m["shards"][0]["bytes"] = header + 2 ** 40 * m["token_bytes"]
    m["total_tokens"] = sum(s["tokens"] for s in m["shards"])
    json.dump(m, open(mpath, "w"))
    port = testlib.free_port()
    server = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                               "--directory", served], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        testlib.wait_port(port)
        spec = write(work, "huge", f"http://127.0.0.1:{port}", "huge_run",
                     data__cache_limit="100TB", data__cache_dir=os.path.join(work, "cache"))
        t0 = time.time()
        p = run([args.ztrain, "train", spec], timeout=60)
        expect_exit(p, 2, "the manifest declares", "13: a manifest claiming 2^40 tokens")
        print(f"13: a manifest claiming 2^40 tokens exits 2 in {time.time() - t0:.1f} s")
    finally:
        testlib.stop([server])

    # 7. a password in a source URL is never shown or written
    spec = write(work, "secret", "http://alice:S3cretPW@127.0.0.1:9/data", "secret_run",
                 data__retries=0, data__timeout_s=1)
    shown = run([args.ztrain, "check", spec])
    failed = run([args.ztrain, "train", spec])
    expect("S3cretPW" not in shown.stdout + shown.stderr and "alice:***@" in shown.stdout,
           f"7: ztrain check shows the password: {shown.stdout[-300:]!r}")
    expect(failed.returncode != 0 and "S3cretPW" not in failed.stdout + failed.stderr and "alice:***@" in failed.stderr,
           f"7: a failing run shows the password: {failed.stderr[-300:]!r}")
    print("7: URL passwords are redacted")

    # 8. train and val from different tokenizers (a meaningless val_loss before)
    other = os.path.join(work, "val_other")
    testlib.run([args.tokenize, "shards", "--vocab", make_small_tiktoken(work), "--out", other,
                 os.path.join(os.path.dirname(data), "input.txt")])
    spec = write(work, "mixed", data, "mixed_run", data__val=other, model__vocab_size=260)
    expect_exit(run([args.ztrain, "train", spec]), 2, "train and val were tokenized differently", "8: mixed tokenizers")

    # 18. messages: a corrupt manifest names line and column; spaces around '=' in --set; s3://
    bad_manifest = os.path.join(work, "bad_manifest")
    shutil.copytree(data, bad_manifest)
    with open(os.path.join(bad_manifest, "manifest.json"), "w") as f:
        f.write('{\n  "format": "ztrain-shards",,\n}\n')
    spec = write(work, "badm", bad_manifest, "badm_run")
    expect_exit(run([args.ztrain, "train", spec]), 2, "not valid JSON at line 2, column", "18: corrupt manifest")
    ok = write(work, "ok18", data)
    p = run([args.ztrain, "check", ok, "--set", "model.n_layer = 2"])
    expect(p.returncode == 0 and "n_layer = 2  #" in p.stdout, f"18: --set 'model.n_layer = 2': {p.stderr!r}")
    expect_exit(run([args.ztrain, "train", ok, "--set", "data.train=s3://"]), 2, "no bucket after s3://",
                "18: data.train=s3://")
    print("8, 18: mixed tokenizers exit 2; messages name line/column, accept spaces, say 'no bucket'")


def make_small_tiktoken(work):
    """A valid tiktoken vocabulary: the 256 bytes, two merges, <|endoftext|> = 258, n_vocab 259."""
    import base64
    path = os.path.join(work, "small.tiktoken")
    with open(path, "w") as f:
        for b in range(256):
            f.write(f"{base64.b64encode(bytes([b])).decode()} {b}\n")
        f.write(f"{base64.b64encode(b'th').decode()} 256\n{base64.b64encode(b'he').decode()} 257\n")
    with open(path.replace(".tiktoken", ".meta.json"), "w") as f:
        json.dump({"pat_str": "\\S+|\\s+", "special_tokens": {"<|endoftext|>": 258}, "n_vocab": 259}, f)
    return path


def main():
    args = testlib.arg_parser().parse_args()
    with testlib.workdir("zt_hard_") as work:
        data = testlib.make_byte_dataset(args.tokenize, os.path.join(work, "data"), 5000, 3)
        spec_items(args, work, data)
        tokenizer_items(args, work, data)
        data_items(args, work, data)
        if shutil.which("mpirun"):
            multi_rank(args, work, data)
        else:
            print("SKIP (multi-rank items): mpirun not found (Debian: openmpi-bin)")
    return testlib.report(failures, "hardening: every reproduced defect is fixed")


if __name__ == "__main__":
    sys.exit(main())
