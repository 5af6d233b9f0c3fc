#!/usr/bin/python3
"""The planner's step time against measured steps over a shaped network: two "machines" (network
namespaces, tests/multihost/netns_hosts.py) joined by a link limited by a token-bucket filter
(tc tbf; netem is missing in this kernel), one rank each, the CPU backend, one thread a rank.
1. the machine as `ztrain doctor --write-machine` measures it under mpirun over the two hosts:
   this CPU's GEMM probe, and each collective's bus bandwidth and latency through the filter;
2. the compute's efficiency against the probe, from a single-rank reference run (its measured step
   over the planned one), written into that file's [calibration];
3. three layouts of a small GPT-2 over the two hosts
   (T1 D2 ZeRO-0, T1 D2 ZeRO-3, T2 D1: tensor parallelism across the slow link), each trained a
   few steps, the median step time against `ztrain plan --world 2 --machine FILE`.
Prints each layout's predicted and measured step and their ratio, and whether the planner ranks
the layouts as measured. Needs root (namespaces, tc); exit 77 when they cannot be made.

--hybrid: two ranks a host (four in all) and two layouts, ZeRO-3 over the four ranks (its gathers
and reduce-scatters cross the link every micro-batch) and ZeRO-3 in 2 replicas of a host each
(hybrid sharding: only the replicas' all-reduce crosses it): the measured speed-up (goal: 1.5x)
beside the planner's. The four ranks share this machine's two cores, which the single-rank
reference does not: the predicted times are then short by about that factor, the ratio is what
is compared.

Usage: bench/shaped_link.py --ztrain build/bin/ztrain --tokenize build/bin/ztrain-tokenize [--rate 200mbit] [--hybrid]
"""
import json
import os
import re
import shutil
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "tests", "multihost"))
import testlib  # noqa: E402
from netns_hosts import Hosts  # noqa: E402

MODEL = {"n_layer": 2, "n_head": 4, "d_model": 128, "vocab_size": 260, "seq_len": 128}
STEPS = 10
LAYOUTS = [("T1 D2 ZeRO-0", ["parallel.zero_stage=0"]), ("T1 D2 ZeRO-3", ["parallel.zero_stage=3"]),
           ("T2 D1", ["parallel.tensor=2"])]
HYBRID = [("T1 D4 ZeRO-3", ["parallel.zero_stage=3"]),
          ("T1 D4 ZeRO-3 in 2 replicas", ["parallel.zero_stage=3", "parallel.replicate=2"])]


def median_step_ms(out_dir):
    rows = testlib.metrics(out_dir, must_exist=False)[2:]  # the first steps pay for warm-up
    return statistics.median(r["step_ms"] for r in rows) if rows else None


def main():
    ap = testlib.arg_parser()
    ap.add_argument("--rate", default="200mbit", help="the link's rate (tc tbf)")
    ap.add_argument("--hybrid", action="store_true", help="2 ranks a host: ZeRO-3 vs ZeRO-3 in 2 replicas")
    args = ap.parse_args()
    per_host = 2 if args.hybrid else 1
    world, layouts = 2 * per_host, HYBRID if args.hybrid else LAYOUTS
    # hybrid: one sequence a micro-batch, so that plain ZeRO-3's traffic outweighs the compute
    micro = 1 if args.hybrid else 4
    why = Hosts.unavailable() or ("" if shutil.which("tc") else "tc not found")
    if why:
        print(f"SKIP: {why}")
        return testlib.SKIP
    with testlib.workdir("zt_shaped_") as work, Hosts(work, 2) as hosts:
        env = testlib.mpi_env()
        data = testlib.make_byte_dataset(args.tokenize, os.path.join(work, "data"), 20000, 7)

        def spec(name, global_batch):
            return testlib.tiny_spec(os.path.join(work, name + ".toml"), os.path.join(work, "run_" + name), data,
                                     model=MODEL, train={"micro_batch": micro, "global_batch": global_batch,
                                                         "max_steps": STEPS, "log_every": 1,
                                                         "eval_every": 0, "sample_tokens": 0},
                                     seed=3, threads=1, comm__timeout_s=120)

        # 1. the machine as `ztrain doctor` measures it over the two hosts: this CPU (its GEMM probe
        # with the job's one thread) and the link, shaped both ways
        for h in hosts.names:
            for dev, ns in ((hosts.veth[h], None), ("eth0", hosts.netns[h])):
                cmd = ["tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", args.rate, "burst", "64kb",
                       "latency", "100ms"]
                subprocess.run((["ip", "netns", "exec", ns] if ns else []) + cmd, check=True)
        ref = spec("reference", micro)
        cpu = os.path.join(work, "measured.toml")
        p = subprocess.run([*hosts.mpirun(world, per_host), args.ztrain, "doctor", ref, "--write-machine", cpu], env=env,
                           capture_output=True, text=True, timeout=600)
        m = re.search(r"collectives .*?: (all-reduce .*)", p.stdout)
        if not m or not os.path.exists(cpu):
            print(f"FAIL: doctor over the shaped link: {p.stdout[-900:]} {p.stderr[-600:]}")
            return 1
        print(f"the link: tbf {args.rate}, as ztrain doctor measured it: {m.group(1)}", flush=True)

        def planned_ms(path, world, sets=()):
            p = testlib.run([args.ztrain, "plan", path, "--world", str(world), "--machine", cpu, "--json",
                             *[a for s in sets for a in ("--set", s)]], check=False)
            if p.returncode != 0:
                raise SystemExit(f"FAIL: ztrain plan: {p.stderr[-600:]}")
            return json.loads(p.stdout)["predicted_step_ms"]

        # 2. the compute's efficiency: one rank, here (no link in its step), against its plan on the
        # probe's figures; written as the machine file's [calibration] (doctor's is 1: the probe)
        p = testlib.run([args.ztrain, "train", ref], check=False, env=env, timeout=900)
        ref_ms = median_step_ms(os.path.join(work, "run_reference"))
        if p.returncode != 0 or not ref_ms:
            print(f"FAIL: the reference run: exit {p.returncode}: {p.stderr[-600:]}")
            return 1
        efficiency = planned_ms(ref, 1) / ref_ms
        with open(cpu) as f:
            text = f.read()
        with open(cpu, "w") as f:
            f.write(text[:text.index("[calibration]")] + "[calibration]\n" + "".join(
                f"{k} = {min(1.0, efficiency)}\n" for k in ("gemm", "attention_forward", "attention_backward",
                                                             "memory", "vector")))
        print(f"this CPU: reference step {ref_ms:.1f} ms measured: efficiency {efficiency:.3f} of doctor's probe",
              flush=True)

        # 3. three layouts over the two hosts
        rows = []
        for name, sets in layouts:
            path = spec(name.replace(" ", "_"), micro * world)
            out = os.path.join(work, "run_" + name.replace(" ", "_"))
            p = subprocess.run([*hosts.mpirun(world, per_host), args.ztrain, "train", path,
                                *[a for s in sets for a in ("--set", s)]], env=env, capture_output=True, text=True,
                               timeout=1800)
            measured = median_step_ms(out)
            if p.returncode != 0 or not measured:
                print(f"FAIL: {name}: exit {p.returncode}: {p.stderr[-600:]}")
                return 1
            predicted = planned_ms(path, world, sets)
            rows.append((name, predicted, measured))
            print(f"{name}: predicted {predicted:.1f} ms, measured {measured:.1f} ms (median of steps 3-{STEPS}): "
                  f"predicted/measured {predicted / measured:.2f}", flush=True)
        rank_p = [n for n, _, _ in sorted(rows, key=lambda r: r[1])]
        rank_m = [n for n, _, _ in sorted(rows, key=lambda r: r[2])]
        same = rank_p == rank_m
        if args.hybrid:  # the speed-up of hybrid sharding, measured and predicted
            (_, p0, m0), (_, p1, m1) = rows
            print(f"hybrid sharding over plain ZeRO-3: measured {m0 / m1:.2f}x (goal 1.5x), predicted {p0 / p1:.2f}x; "
                  f"ranking {'the same' if same else 'DIFFERENT'}")
            return 0 if m0 / m1 >= 1.5 and same else 1
        within = all(abs(p / m - 1) <= 0.25 for _, p, m in rows)
        print(f"ranking: predicted {rank_p}, measured {rank_m}: {'the same' if same else 'DIFFERENT'}; "
              f"every layout within 25%: {within}")
        return 0 if within and same else 1


if __name__ == "__main__":
    sys.exit(main())
