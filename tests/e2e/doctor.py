#!/usr/bin/python3
"""`ztrain doctor` (issue 15): one report line per check with PASS / WARN / FAIL and the fix.
- on this machine without a GPU: exit 0, GPU lines say "no GPU", MPI, host memory and ulimits;
- with a spec: an unreachable data source and an out_dir that cannot be created are FAILs (exit
  1) naming them and the fix; a reachable local dataset passes;
- under mpirun: the collectives' bus bandwidths are measured, and written as a machine file on
  which `ztrain plan --machine` prices the step doctor priced.
"""
import json
import os
import re
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import testlib  # noqa: E402

failures, expect = testlib.checks()


def main():
    args = testlib.arg_parser().parse_args()
    with testlib.workdir("zt_doctor_") as work:
        p = testlib.run([args.ztrain, "doctor"], check=False)
        lines = p.stdout.splitlines()
        expect(p.returncode == 0, f"doctor: exit {p.returncode}: {p.stdout}{p.stderr}")
        for name in ("gpu", "host memory", "ulimit memlock", "ulimit nofile", "mpi", "collectives"):
            expect(any(re.match(rf"(PASS|WARN)\s+{re.escape(name)}\s", l) for l in lines), f"doctor: no {name} line: {lines}")
        print("doctor, no spec:\n  " + "\n  ".join(lines))

        data = testlib.make_byte_dataset(args.tokenize, os.path.join(work, "data"), 3000, 2)
        blocker = os.path.join(work, "a_file")
        open(blocker, "w").write("x")
        spec = os.path.join(work, "spec.toml")
        testlib.write_spec(spec, {"run": {"out_dir": os.path.join(blocker, "run"), "device": "cpu"},
                                  "model": {"n_layer": 1, "n_head": 1, "d_model": 8, "vocab_size": 257, "seq_len": 8},
                                  "data": {"train": "http://127.0.0.1:9/nothing", "val": data, "retries": 0,
                                           "timeout_s": 1, "cache_dir": os.path.join(work, "cache")}})
        p = testlib.run([args.ztrain, "doctor", spec], check=False)
        out = p.stdout
        expect(p.returncode == 1, f"doctor with bad sources: exit {p.returncode}")
        expect(re.search(r"FAIL\s+data train\s+http://127\.0\.0\.1:9/nothing", out) and "fix:" in out,
               f"doctor: the unreachable source is not a FAIL with a fix: {out}")
        expect(re.search(r"PASS\s+data val\s+.*manifest\.json present", out), f"doctor: the local dataset: {out}")
        expect(re.search(r"FAIL\s+out_dir\s+", out), f"doctor: the out_dir under a file: {out}")
        expect(re.search(r"(PASS|WARN)\s+cache_dir\s+.*MB/s", out), f"doctor: cache_dir speed: {out}")
        print("doctor, bad spec: FAIL lines for the unreachable source and the out_dir, exit 1")

        # a GPU run with a low memlock limit: pinned buffers would fail (and no GPU here: a FAIL)
        gpu_spec = os.path.join(work, "gpu.toml")
        testlib.write_spec(gpu_spec, {"run": {"out_dir": os.path.join(work, "g"), "device": "cuda"},
                                      "model": {"n_layer": 1, "n_head": 1, "d_model": 8, "vocab_size": 257,
                                                "seq_len": 8}, "data": {"train": data}})
        p = testlib.run(["bash", "-c", f'ulimit -l 64 && exec "{args.ztrain}" doctor "{gpu_spec}"'], check=False)
        expect(p.returncode == 1 and re.search(r"WARN\s+ulimit memlock\s+0 MiB", p.stdout)
               and re.search(r"FAIL\s+gpu\s+no GPU", p.stdout) and "memlock=-1" in p.stdout,
               f"doctor, low memlock for a GPU run: {p.returncode}: {p.stdout}")
        print("doctor, GPU spec with ulimit -l 64: WARN memlock with the fix, FAIL no GPU")

        if shutil.which("mpirun"):
            p = testlib.run([*testlib.mpirun(2), args.ztrain, "doctor"], check=False)
            m = re.search(r"collectives\s+2 ranks \(1 machine of 2\), MPI in host memory, 16 MiB: all-reduce ([\d.e+-]+), "
                          r"reduce-scatter ([\d.e+-]+), all-gather ([\d.e+-]+) GB/s bus; ([\d.e+-]+) us a step", p.stdout)
            expect(p.returncode == 0 and m and all(float(x) > 0 for x in m.groups()),
                   f"doctor under mpirun: {p.stdout}{p.stderr[-300:]}")
            if m:
                print(f"doctor under mpirun -np 2: all-reduce, reduce-scatter, all-gather bus bandwidth "
                      f"{m.group(1)}, {m.group(2)}, {m.group(3)} GB/s, {m.group(4)} us a step")
            # with a spec: the planner's step on this machine and that bandwidth, and the share of it
            # waiting for communication (PASS or WARN: the level depends on what was measured)
            zspec = os.path.join(work, "zero3.toml")
            testlib.write_spec(zspec, {"run": {"out_dir": os.path.join(work, "z"), "device": "cpu", "threads": 1},
                                       "model": {"n_layer": 2, "n_head": 2, "d_model": 32, "vocab_size": 257,
                                                 "seq_len": 16},
                                       "train": {"micro_batch": 1, "global_batch": 2},
                                       "parallel": {"zero_stage": 3}, "data": {"train": data}})
            machine = os.path.join(work, "measured.toml")
            p = testlib.run([*testlib.mpirun(2), args.ztrain, "doctor", zspec, "--write-machine", machine], check=False)
            m = re.search(r"(PASS|WARN)\s+communication\s+tensor 1 x data 2, ZeRO-3, micro_batch 1: predicted step "
                          r"([\d.e+]+) ms on CPU \(measured\), collectives [\d.e+]+ ms, (\d+)% of the step waiting",
                          p.stdout)
            expect(m is not None, f"doctor under mpirun with a ZeRO-3 spec: no communication line: {p.stdout}")
            if m:
                print(f"doctor under mpirun -np 2, ZeRO-3, 16 tokens a micro-step: {m.group(1)}, {m.group(3)}% waiting")
            # the machine it measured, written: `ztrain plan --machine` prices the same step on it
            expect(re.search(r"PASS\s+machine file\s+", p.stdout) and os.path.exists(machine),
                   f"doctor --write-machine: {p.stdout}")
            if m and os.path.exists(machine):
                q = testlib.run([args.ztrain, "plan", zspec, "--world", "2", "--machine", machine, "--json"], check=False)
                planned = json.loads(q.stdout)["predicted_step_ms"] if q.returncode == 0 else None
                expect(planned is not None and abs(planned / float(m.group(2)) - 1) < 0.01,
                       f"plan --machine on doctor's file: {planned} ms vs doctor's {m.group(2)} ms: {q.stderr[-400:]}")
                print(f"doctor --write-machine, then plan --machine on it: {planned:.3g} ms, doctor's line "
                      f"{m.group(2)} ms")
    return testlib.report(failures, "ztrain doctor reports every check and fails what would fail the job")


if __name__ == "__main__":
    sys.exit(main())
