#!/usr/bin/python3
"""Hardening, round 3 (issue 26): defects a hostile new user found, reproduced and checked fixed.
Numbers are the issue's items; each case failed before its fix.

 1. `ztrain report` never writes outside --out, and no run directory or --out reaches a shell or
    gnuplot's script: a run dir `notes"_run` leaves the file `notes` alone, backquotes run nothing,
    --out 'a"b.png' leaves `a` alone.
 5. `ztrain plan` of an absurd shape exits 2 at once (the footprint check `train` runs first).
 6. An fp32 checkpoint resumed with fp16 compute starts at [precision] initial_scale.
 7. `ztrain plan` holds the plan to the spec's [run] device_memory_limit.
15. `report --out` into a missing directory or onto a directory: exit 2 naming it.
16. metrics.jsonl truncated under a running job (logrotate's copytruncate) holds no NUL bytes.
17. A checkpoint past [train] max_steps: exit 2 naming it, nothing evaluated under a wrong step.
18. `ckpt verify` takes what --resume takes: the checkpoint root (through `latest`) and a
    checkpoint.h5 file.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import testlib  # noqa: E402

failures, expect = testlib.checks(echo=True)
MODEL = {"n_layer": 1, "n_head": 2, "d_model": 16, "vocab_size": 258, "seq_len": 16}


def spec(work, name, data, **over):
    """work/name.toml: a 1-layer model training into work/name, with section__key overrides."""
    train = {"micro_batch": 2, "global_batch": 4, "max_steps": 6, "log_every": 1}
    train.update(over.pop("train", {}))
    model = over.pop("model", MODEL)
    return testlib.tiny_spec(os.path.join(work, name + ".toml"), os.path.join(work, name), data, model, train,
                             optim={"lr": 1e-3}, seed=42, **over)


def main():
    args = testlib.arg_parser().parse_args()
    z = os.path.abspath(args.ztrain)
    with tempfile.TemporaryDirectory() as work:
        data = testlib.make_byte_dataset(args.tokenize, os.path.join(work, "data"), 20000, 5)
        ck = os.path.join(work, "ck")
        base = spec(work, "base", data, checkpoint__dir=ck, checkpoint__every_steps=2, checkpoint__async=False)
        p = testlib.run([z, "train", base], check=False)
        expect(p.returncode == 0, f"base run: exit {p.returncode}: {p.stderr[-500:]}")

        # 18. ckpt verify of the root and of a checkpoint.h5 file
        latest = open(os.path.join(ck, "latest")).read().split()[0]
        for given in (ck, os.path.join(ck, latest, "checkpoint.h5")):
            p = testlib.run([z, "ckpt", "verify", given], check=False)
            expect(p.returncode == 0 and ": ok" in p.stdout, f"18: ckpt verify {given}: {p.returncode} {p.stderr}")

        # 17. a step-6 checkpoint resumed with max_steps = 4
        past = spec(work, "past", data, checkpoint__dir=ck, train={"max_steps": 4})
        p = testlib.run([z, "train", past, "--resume", "auto"], check=False)
        expect(p.returncode == 2 and "past [train] max_steps = 4" in p.stderr,
               f"17: resume past max_steps: {p.returncode} {p.stderr[-400:]}")
        expect(not any(r.get("kind") == "eval" for r in testlib.metrics(os.path.join(work, "past"), None, False)),
               "17: evaluated under a wrong step")

        # 6. fp32 checkpoint resumed in fp16: the spec's initial scale, not the saved 1
        ck16 = os.path.join(work, "ck16")
        p = testlib.run([z, "train", spec(work, "fp32", data, checkpoint__dir=ck16, checkpoint__every_steps=2,
                                          checkpoint__async=False, train={"max_steps": 2})], check=False)
        expect(p.returncode == 0, f"6: fp32 run: {p.returncode} {p.stderr[-300:]}")
        fp16 = spec(work, "fp16", data, checkpoint__dir=ck16, precision__compute="fp16", train={"max_steps": 4})
        p = testlib.run([z, "train", fp16, "--resume", "auto"], check=False)
        recs = testlib.metrics(os.path.join(work, "fp16"), must_exist=False)
        scales = [r.get("loss_scale") for r in recs]
        print(f"6: fp32 checkpoint resumed in fp16: loss scales {scales}")
        expect(p.returncode == 0 and scales and scales[0] == 65536, f"6: {p.returncode} {scales} {p.stderr[-300:]}")

        # 16. metrics.jsonl truncated while the run writes it
        long = spec(work, "long", data, train={"max_steps": 400, "log_every": 1})
        metrics = os.path.join(work, "long", "metrics.jsonl")
        # each step 20 ms longer: the run is still writing when the file is truncated, however fast
        job = subprocess.Popen([z, "train", long], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "ZTRAIN_FAULT_SLOW_HOST_MS": "20"})
        deadline = time.time() + 120
        while time.time() < deadline and (not os.path.exists(metrics) or len(open(metrics).readlines()) < 5):
            time.sleep(0.05)
        os.truncate(metrics, 0)  # what logrotate's copytruncate does
        _, err = job.communicate(timeout=600)
        raw = open(metrics, "rb").read()
        lines = raw.decode(errors="replace").splitlines()
        parsed = sum(1 for ln in lines if _parses(ln))
        print(f"16: after a truncation mid-run: {len(raw)} bytes, {raw.count(0)} NUL bytes, {parsed}/{len(lines)} "
              "lines parse")
        expect(job.returncode == 0 and raw.count(0) == 0 and parsed == len(lines) > 0,
               f"16: exit {job.returncode}, {raw.count(0)} NUL bytes, {parsed}/{len(lines)} lines: {err[-300:]}")

        # 7. plan under the spec's device_memory_limit
        limited = spec(work, "limited", data, run__device_memory_limit="3MiB", model={**MODEL, "d_model": 256})
        p = testlib.run([z, "plan", limited, "--json"], check=False)
        fits = json.loads(p.stdout).get("fits") if p.returncode == 0 else None
        refused = p.returncode == 2 and "[run] device_memory_limit" in p.stderr  # the footprint check, first
        print(f"7: plan under a 3 MiB [run] device_memory_limit: exit {p.returncode}, fits {fits}")
        expect(fits is False or refused, f"7: plan under a 3 MiB limit: {p.returncode}, fits {fits}: {p.stderr[-300:]}")

        # 5. plan of an absurd shape
        absurd = spec(work, "absurd", data, model={**MODEL, "n_layer": 100000000, "d_model": 100000000, "d_ff": 4})
        t0 = time.time()
        try:
            p = testlib.run([z, "plan", absurd], check=False, timeout=60)
        except subprocess.TimeoutExpired:  # what it did: grow to the machine's memory
            p = subprocess.CompletedProcess([], -9, "", "(killed by the test after 60 s)")
        took = time.time() - t0
        print(f"5: plan of n_layer 1e8, d_model 1e8: exit {p.returncode} in {took:.2f} s")
        expect(p.returncode == 2 and took < 5 and "needs at least" in p.stderr,
               f"5: absurd plan: exit {p.returncode} after {took:.1f} s: {p.stderr[-300:]}")

        # 1 and 15. report: paths never reach a shell or gnuplot's script; --out checked first
        if shutil.which("gnuplot"):
            run_metrics = os.path.join(work, "base", "metrics.jsonl")
            notes = os.path.join(work, "notes")
            with open(notes, "w") as f:
                f.write("my notes\n")
            for name in ('notes"_run', "x`touch PWNED`y", "y$(touch PWNED2)z"):
                d = os.path.join(work, name)
                os.makedirs(d)
                shutil.copy(run_metrics, d)
                p = testlib.run([z, "report", d], check=False, cwd=work)
                expect(p.returncode == 0 and os.path.getsize(os.path.join(d, "report.png")) > 1000,
                       f"1: report of {name!r}: {p.returncode} {p.stderr[-300:]}")
            expect(open(notes).read() == "my notes\n", "1: report truncated the unrelated file `notes`")
            expect(not any(os.path.exists(os.path.join(work, f)) for f in ("PWNED", "PWNED2")),
                   "1: a run directory's name ran a shell command")
            a = os.path.join(work, "a")
            with open(a, "w") as f:
                f.write("keep\n")
            out = os.path.join(work, 'a"b.png')
            p = testlib.run([z, "report", os.path.join(work, "base"), "--out", out], check=False)
            expect(p.returncode == 0 and os.path.exists(out) and open(a).read() == "keep\n",
                   f"1: --out with a quote: {p.returncode}, `a` {'intact' if open(a).read() == 'keep' + chr(10) else 'damaged'}")
            for bad, why in ((os.path.join(work, "missing", "r.png"), "not an existing directory"), (work, "is a directory")):
                p = testlib.run([z, "report", os.path.join(work, "base"), "--out", bad], check=False)
                expect(p.returncode == 2 and why in p.stderr and "gnuplot" not in p.stderr,
                       f"15: report --out {bad}: {p.returncode} {p.stderr[-300:]}")
        else:
            print("SKIP (report cases 1, 15): gnuplot not found (Debian: gnuplot-nox)")
    return testlib.report(failures, "hardening round 3: report, plan, resume, metrics and ckpt verify cases hold")


def _parses(line):
    try:
        json.loads(line)
        return True
    except ValueError:
        return False


if __name__ == "__main__":
    sys.exit(main())
