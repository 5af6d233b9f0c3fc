#!/usr/bin/python3
"""Hardening, round 3 (issue 26): the checkpoint, export and path cases. Numbers are the issue's
items; each case failed before its fix. The full-disk and read-only cases mount small tmpfs
filesystems (root may; elsewhere they print that they were not provoked).

 2. A re-export onto a disk that fills up leaves the previous export whole (built beside --out,
    swapped in); files the user keeps there survive a re-export.
 3. Two runs with one [checkpoint] dir: the second exits 2 at start naming the holder, and the
    first one's save in flight is untouched.
 4. A full disk during a save (the rank file or the master file; synchronous or async; one rank
    or two): exit 1 naming the file and errno's text, no signal, no MPI_Abort, the previous
    checkpoint and `latest` intact, no step_N.tmp-* left.
 9. A rank file copied from another step's checkpoint: verify names it, resume refuses it.
10. A save killed by kill -9 leaves nothing behind once the restarted job saves (nor does an
    older ztrain's step_N.tmp-J.superseded-K).
11. A block deleted from a rank file, or rank files swapped: verify names it, and resume =
    "auto" falls back to the previous checkpoint.
12. An unusable checkpoint destination (read-only, a missing bucket, bad credentials) exits 2 at
    start naming [checkpoint] dir, before any step.
14. Bad paths exit 2 naming the key or argument: checkpoint.dir a file, export --out a file,
    metrics.jsonl a directory, init_from's model.safetensors a symlink loop or /dev/zero.
"""
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import testlib  # noqa: E402

failures, expect = testlib.checks(echo=True)
# 2 layers of d_model 64: a 1.5 MB rank file, a 64 KB master file (the full-disk sizes below)
MODEL = {"n_layer": 2, "n_head": 2, "d_model": 64, "vocab_size": 258, "seq_len": 16}
PAGE = 4096


def spec(work, name, data, **over):
    """work/name.toml: a 2-layer model training 6 steps into work/name, checkpoints every 2 steps."""
    train = {"micro_batch": 2, "global_batch": 4, "max_steps": 6, "log_every": 1}
    train.update(over.pop("train", {}))
    over.setdefault("checkpoint__every_steps", 2)
    return testlib.tiny_spec(os.path.join(work, name + ".toml"), os.path.join(work, name), data, MODEL, train,
                             optim={"lr": 1e-3}, seed=42, **over)


def leftovers(ck):
    return sorted(e for e in os.listdir(ck) if ".tmp-" in e or "superseded" in e) if os.path.isdir(ck) else []


def crashed(p):
    """A signal, a segfault or an MPI abort in a finished process's result."""
    return p.returncode < 0 or p.returncode > 128 or "MPI_ABORT" in p.stderr or "Segmentation" in p.stderr


def pages(n):
    return (n + PAGE - 1) // PAGE * PAGE


def full_disk(z, work, data, sizes):
    """4: saves onto a tmpfs too small for them."""
    rank_file, master = sizes
    cases = [  # (name, tmpfs bytes, ranks, async, what fails, the step that fails)
        ("rank file, sync", 2 * pages(rank_file) - 8 * PAGE, 1, False, "rank_00000.h5", 4),
        ("rank file, async", 2 * pages(rank_file) - 8 * PAGE, 1, True, "rank_00000.h5", 4),
        ("master file", pages(rank_file) + max(2, pages(master) // PAGE // 2) * PAGE, 1, False, "checkpoint.h5", 2),
        ("two ranks, ZeRO-1", 2 * pages(rank_file) - 8 * PAGE, 2, False, ".h5", 4),
    ]
    for name, size, np_, async_, file, step in cases:
        with testlib.mounted(work, "tmpfs", f"size={size}", "full disk during a save") as ck:
            if ck is None:
                return
            s = spec(work, "full", data, checkpoint__dir=ck, checkpoint__async=async_, parallel__zero_stage=1)
            p = testlib.run(testlib.train_cmd(z, s, np_=np_), check=False, env=testlib.mpi_env(), timeout=300)
            lines = [l for l in p.stderr.splitlines() if l.startswith("ztrain: failure")]
            named = any(file in l and "No space left on device" in l and f"step {step}" in l for l in lines)
            prev = f"step_{step - 2:08d}"
            latest = open(os.path.join(ck, "latest")).read().split()[0] if os.path.exists(os.path.join(ck, "latest")) else None
            intact = step == 2 or (latest == prev and testlib.run([z, "ckpt", "verify", os.path.join(ck, prev)],
                                                                   check=False).returncode == 0)
            left = leftovers(ck)
            print(f"4: {name}: exit {p.returncode}, {lines[:1]}, latest {latest}, left {left}")
            expect(p.returncode == 1 and not crashed(p) and named and intact and not left and
                   (step > 2 or latest is None),
                   f"4: {name}: exit {p.returncode}, named {named}, latest {latest}, intact {intact}, left {left}: "
                   f"{p.stderr[-700:]}")


def lock_and_kill(z, work, data):
    """3 and 10: one checkpoint dir, two runs; a save killed half-way, then the restart's saves."""
    ck = os.path.join(work, "shared_ck")
    first = spec(work, "first", data, checkpoint__dir=ck, checkpoint__async=False)
    job = subprocess.Popen([z, "train", first], env=dict(os.environ, ZTRAIN_TEST_PAUSE_SAVE="0:4"),
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    paused = False
    for line in job.stderr:
        if "pauses in the middle of saving step 4" in line:
            paused = True
            break
    expect(paused, "3: the first run never reached its paused save")
    tmp_before = leftovers(ck)
    second = spec(work, "second", data, checkpoint__dir=ck, train={"max_steps": 2})
    p = testlib.run([z, "train", second], check=False, timeout=120)
    print(f"3: a second run on the same checkpoint dir: exit {p.returncode}: {p.stderr.strip().splitlines()[-1:]}")
    expect(p.returncode == 2 and "[checkpoint] dir" in p.stderr and f"pid {job.pid}" in p.stderr
           and "in use by another ztrain run" in p.stderr,
           f"3: second run on a locked checkpoint dir: exit {p.returncode}: {p.stderr[-400:]}")
    expect(leftovers(ck) == tmp_before and tmp_before, f"3: the first run's save in flight: {tmp_before} -> {leftovers(ck)}")

    # 10. kill -9 in the middle of the save; an older ztrain's set-aside leftover beside it
    job.kill()
    job.wait()
    os.makedirs(os.path.join(ck, "step_00000006.tmp-123.superseded-456"))
    with open(os.path.join(ck, "step_00000006.tmp-123.superseded-456", "rank_00000.h5"), "wb") as f:
        f.write(b"\0" * 1000)
    killed = leftovers(ck)
    p = testlib.run([z, "train", first, "--resume", "auto"], check=False, timeout=300)
    left = leftovers(ck)
    print(f"10: after kill -9 during a save ({killed}) and a restart that saved: exit {p.returncode}, left {left}")
    expect(p.returncode == 0 and len(killed) == 2 and not left, f"10: exit {p.returncode}, left {left}: {p.stderr[-400:]}")


def ties_and_blocks(z, work, data):
    """9 and 11: rank files that are not the checkpoint's own."""
    h5py, = testlib.require("h5py", hint="Debian: python3-h5py")
    ck = os.path.join(work, "ties_ck")
    base = spec(work, "ties", data, checkpoint__dir=ck, checkpoint__async=False, parallel__zero_stage=1)
    p = testlib.run(testlib.train_cmd(z, base, np_=2), check=False, env=testlib.mpi_env(), timeout=300)
    expect(p.returncode == 0, f"9: two-rank base run: {p.returncode} {p.stderr[-300:]}")
    keep = os.path.join(work, "ties_keep")
    shutil.copytree(ck, keep)

    def damaged(how, damage, cue):
        shutil.rmtree(ck)
        shutil.copytree(keep, ck)
        damage(os.path.join(ck, "step_00000006"))
        v = testlib.run([z, "ckpt", "verify", os.path.join(ck, "step_00000006")], check=False)
        e = testlib.run(testlib.train_cmd(z, base, ["train.max_steps=8"], np_=2, resume=os.path.join(ck, "step_00000006")),
                        check=False, env=testlib.mpi_env(), timeout=300)
        expect(e.returncode == 2 and cue in e.stderr, f"{how}: resume of it: {e.returncode} {e.stderr[-400:]}")
        r = testlib.run(testlib.train_cmd(z, base, ["train.max_steps=8"], np_=2, resume="auto"), check=False,
                        env=testlib.mpi_env(), timeout=300)
        fell_back = "falling back" in r.stderr and "resumed from" in r.stderr + r.stdout and "step_00000004" in r.stderr
        print(f"{how}: verify exit {v.returncode} ({(v.stdout + v.stderr).strip()[-160:]}); resume of it: exit "
              f"{e.returncode}; resume auto: exit {r.returncode}, fell back to step 4: {fell_back}")
        expect(v.returncode != 0 and cue in v.stdout + v.stderr, f"{how}: verify: {v.returncode} {v.stdout} {v.stderr}")
        expect(r.returncode == 0 and fell_back, f"{how}: resume auto: {r.returncode} {r.stderr[-600:]}")
        return r

    def copy_other_step(d):
        shutil.copy(os.path.join(ck, "step_00000004", "rank_00000.h5"), os.path.join(d, "rank_00000.h5"))

    def delete_block(d):
        with h5py.File(os.path.join(d, "rank_00001.h5"), "a") as f:
            name = next(n for n in f["params"])
            del f[f"params/{name}/0"]

    def swap(d):
        a, b = os.path.join(d, "rank_00000.h5"), os.path.join(d, "rank_00001.h5")
        os.rename(a, a + ".x")
        os.rename(b, a)
        os.rename(a + ".x", b)

    damaged("9: a rank file of step 4 in step 6", copy_other_step, "another save")
    damaged("11: a block deleted from a rank file", delete_block, "no block")
    damaged("11: rank files swapped", swap, "rank files swapped")


def destinations(z, work, data):
    """12: destinations that cannot take a checkpoint, found at start."""
    with testlib.mounted(work, "tmpfs", "ro,size=64k", "read-only checkpoint dir") as ro:
        if ro is not None:
            s = spec(work, "ro", data, checkpoint__dir=ro, checkpoint__every_steps=1000, train={"max_steps": 2000})
            t0 = time.time()
            p = testlib.run([z, "train", s], check=False, timeout=120)
            steps = testlib.metrics(os.path.join(work, "ro"), must_exist=False)
            print(f"12: a read-only checkpoint dir: exit {p.returncode} after {time.time() - t0:.1f} s, {len(steps)} "
                  f"steps: {p.stderr.strip().splitlines()[-1:]}")
            expect(p.returncode == 2 and "[checkpoint] dir" in p.stderr and "Read-only file system" in p.stderr
                   and not steps, f"12: read-only: {p.returncode} {p.stderr[-300:]}")
    if not testlib.s3rver_path():
        print("SKIP (12, s3 cases): s3rver not installed (`npm ci` in tests/data)")
        return
    procs = []
    try:
        s3, port = testlib.start_s3rver(os.path.join(work, "s3"), "zt")
        procs.append(s3)
        store = {"train": data, "s3_endpoint": f"http://127.0.0.1:{port}", "s3_path_style": True, "retries": 2}
        for name, uri, key in (("a missing bucket", "s3://nobucket/ck", testlib.S3_KEY),
                               ("bad credentials", "s3://zt/ck", "WRONGKEY")):
            s = testlib.tiny_spec(os.path.join(work, "s3.toml"), os.path.join(work, "s3run"), store, MODEL,
                                  {"micro_batch": 2, "global_batch": 4, "max_steps": 2000, "log_every": 1}, seed=1,
                                  checkpoint__dir=uri, checkpoint__every_steps=1000)
            env = dict(os.environ, AWS_ACCESS_KEY_ID=key, AWS_SECRET_ACCESS_KEY=key)
            p = testlib.run([z, "train", s], check=False, env=env, timeout=120)
            steps = testlib.metrics(os.path.join(work, "s3run"), must_exist=False)
            print(f"12: {name}: exit {p.returncode}, {len(steps)} steps: {p.stderr.strip().splitlines()[-1:]}")
            expect(p.returncode == 2 and "[checkpoint] dir" in p.stderr and not steps,
                   f"12: {name}: {p.returncode} {p.stderr[-300:]}")
    finally:
        testlib.stop(procs)


def bad_paths(z, work, data, ckpt):
    """14: each bad path exits 2 naming its key or argument."""
    a_file = os.path.join(work, "a_file")
    with open(a_file, "w") as f:
        f.write("not a directory\n")
    cases = [("checkpoint.dir a file", [z, "train", spec(work, "p1", data, checkpoint__dir=a_file)], "[checkpoint] dir"),
             ("export --out a file", [z, "export", ckpt, "--format", "hf", "--out", a_file], "export: --out")]
    out3 = os.path.join(work, "p3")
    os.makedirs(os.path.join(out3, "metrics.jsonl"))
    cases.append(("metrics.jsonl a directory", [z, "train", spec(work, "p3", data, checkpoint__every_steps=0)],
                  "[run] out_dir"))
    hf = os.path.join(work, "hf_export")
    p = testlib.run([z, "export", ckpt, "--format", "hf", "--out", hf, "--dtype", "fp32"], check=False)
    expect(p.returncode == 0, f"14: export for init_from: {p.returncode} {p.stderr[-300:]}")
    for name, target in (("a symlink loop", None), ("/dev/zero", "/dev/zero")):
        d = os.path.join(work, "hf_" + name.replace("/", "").replace(" ", "_"))
        shutil.copytree(hf, d)
        w = os.path.join(d, "model.safetensors")
        os.remove(w)
        os.symlink(target or w, w)
        cases.append((f"init_from's model.safetensors {name}",
                      [z, "train", spec(work, os.path.basename(d), data, model__init_from=d, checkpoint__every_steps=0)], "[model] init_from"))
    for name, cmd, key in cases:
        try:
            p = testlib.run(cmd, check=False, timeout=60)
        except subprocess.TimeoutExpired:
            p = subprocess.CompletedProcess(cmd, -9, "", "(killed by the test after 60 s)")
        msg = [l for l in p.stderr.splitlines() if l.startswith("ztrain")]
        print(f"14: {name}: exit {p.returncode}: {msg[-1:] if msg else p.stderr[-200:]}")
        expect(p.returncode == 2 and key in p.stderr and "filesystem error" not in p.stderr,
               f"14: {name}: exit {p.returncode}: {p.stderr[-300:]}")


def export_swap(z, work, ckpt):
    """2: re-exports never lose the previous export."""
    def contents(d):
        return {n: hashlib.sha256(open(os.path.join(d, n), "rb").read()).hexdigest() for n in sorted(os.listdir(d))}
    plain = os.path.join(work, "exp_plain")
    p = testlib.run([z, "export", ckpt, "--format", "hf", "--out", plain, "--max-file-size", "200KB"], check=False)
    expect(p.returncode == 0, f"2: export: {p.returncode} {p.stderr[-300:]}")
    with open(os.path.join(plain, "tokenizer.json"), "w") as f:
        f.write("{}\n")
    p = testlib.run([z, "export", ckpt, "--format", "hf", "--out", plain, "--max-file-size", "300KB"], check=False)
    expect(p.returncode == 0 and os.path.exists(os.path.join(plain, "tokenizer.json")),
           f"2: a re-export kept the user's tokenizer.json: {p.returncode} {sorted(os.listdir(plain))}")
    # through a symlink the target is replaced (the link stays a link); a run's out_dir is refused
    target, link = os.path.join(work, "exp_target"), os.path.join(work, "exp_link")
    os.makedirs(target)
    os.symlink(target, link)
    p = testlib.run([z, "export", ckpt, "--format", "hf", "--out", link], check=False)
    expect(p.returncode == 0 and os.path.islink(link) and os.path.exists(os.path.join(target, "config.json")),
           f"2: export through a symlink: {p.returncode} link {os.path.islink(link)} {p.stderr[-300:]}")
    run_dir = os.path.join(work, "base")
    p = testlib.run([z, "export", ckpt, "--format", "hf", "--out", run_dir], check=False)
    expect(p.returncode == 2 and "export: --out" in p.stderr and os.path.exists(os.path.join(run_dir, "metrics.jsonl")),
           f"2: export onto a run's out_dir: {p.returncode} {p.stderr[-300:]}")
    used = sum(pages(os.path.getsize(os.path.join(plain, n))) for n in os.listdir(plain) if n != "tokenizer.json")
    # room for 1.5 bf16 exports: not for the fp32 one (twice the bytes), even with the previous gone
    with testlib.mounted(work, "tmpfs", f"size={pages(used * 3 // 2)}", "re-export onto a full disk") as disk:
        if disk is None:
            return
        out = os.path.join(disk, "export")
        p = testlib.run([z, "export", ckpt, "--format", "hf", "--out", out, "--max-file-size", "200KB"], check=False)
        expect(p.returncode == 0, f"2: first export onto the small disk: {p.returncode} {p.stderr[-300:]}")
        before = contents(out)
        p = testlib.run([z, "export", ckpt, "--format", "hf", "--out", out, "--max-file-size", "200KB",
                         "--dtype", "fp32"], check=False)
        after = contents(out)
        beside = [e for e in os.listdir(disk) if e != "export"]
        print(f"2: a re-export onto a full disk: exit {p.returncode}; previous export "
              f"{'whole' if after == before else 'changed'} ({len(before)} files); beside it: {beside}")
        expect(p.returncode == 1 and after == before and not beside and "No space left on device" in p.stderr,
               f"2: exit {p.returncode}, previous {'whole' if after == before else 'changed'}, beside {beside}: "
               f"{p.stderr[-300:]}")


def main():
    args = testlib.arg_parser().parse_args()
    z = os.path.abspath(args.ztrain)
    if testlib.mpirun_missing():
        return testlib.SKIP
    with tempfile.TemporaryDirectory() as work:
        data = testlib.make_byte_dataset(args.tokenize, os.path.join(work, "data"), 20000, 5)
        ck = os.path.join(work, "ck")
        p = testlib.run([z, "train", spec(work, "base", data, checkpoint__dir=ck, checkpoint__async=False)], check=False)
        expect(p.returncode == 0, f"base run: exit {p.returncode}: {p.stderr[-500:]}")
        step6 = os.path.join(ck, "step_00000006")
        sizes = (os.path.getsize(os.path.join(step6, "rank_00000.h5")), os.path.getsize(os.path.join(step6, "checkpoint.h5")))
        full_disk(z, work, data, sizes)
        lock_and_kill(z, work, data)
        ties_and_blocks(z, work, data)
        destinations(z, work, data)
        bad_paths(z, work, data, step6)
        export_swap(z, work, step6)
    return testlib.report(failures, "hardening round 3: checkpoint locks, full disks, rank-file ties, destinations, "
                                    "paths and re-exports hold")


if __name__ == "__main__":
    sys.exit(main())
