#!/usr/bin/python3
"""The flight recorder ([comm] flight_entries; engine/comm/flight_recorder.h), on real ranks:
- 4 ranks, tensor 2 x data 2: one rank stops responding inside step 3 (ZTRAIN_FAULT_HANG, after its
  forward: it never enters the backward's collectives). The others time out, and the timeout
  message names that rank and its host as the one that never entered the collective they are
  stuck in; every other rank wrote flight_rank_NNNNN.json, whose last entry of the stuck group is
  the collective, not ended, with the same sequence number on every rank of the group. Another
  rank hung names that one: the name comes from the comparison, not from a fixed rank.
- SIGUSR2 to mpirun (which forwards it to every rank) writes every rank's file and the job goes on
  to the end;
- a rank killed by SIGSEGV writes its file ("why": "SIGSEGV") before it ends;
- [comm] flight_entries = -1 exits 2 naming the key.
Skips (exit 77) without mpirun.
"""
import glob
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import testlib  # noqa: E402


def main():
    with testlib.mpi_test("zt_flight_", 8000, 5) as (args, failures, expect, work, data):

        def spec(name, steps=6):
            return testlib.tiny_spec(os.path.join(work, name + ".toml"), os.path.join(work, "run_" + name), data,
                                     model=testlib.TINY_MODEL, train={"micro_batch": 2, "global_batch": 8,
                                                                      "max_steps": steps, "log_every": 1},
                                     seed=3)

        def cmd(name, np_, env_keys=(), sets=(), steps=6):
            extra = [a for k in env_keys for a in ("-x", k)]
            return [*testlib.mpirun(np_), *extra, args.ztrain, "train", spec(name, steps),
                    *[a for s in sets for a in ("--set", s)]]

        def files(name):
            out = {}
            for f in sorted(glob.glob(os.path.join(work, "run_" + name, "flight_rank_*.json"))):
                with open(f) as fh:
                    out[int(f[-10:-5])] = json.load(fh)
            return out

        # ---- a rank that never enters: named by the others
        host = os.uname().nodename
        # (the layout: tensor 2 x data 2; hybrid sharding, whose shard and replica groups the
        # recorder tells apart by rank)
        for hung, layout in ((3, ["parallel.tensor=2"]), (1, ["parallel.tensor=2"]),
                             (2, ["parallel.zero_stage=3", "parallel.replicate=2"])):
            name = f"hang{hung}" + ("_hybrid" if len(layout) > 1 else "")
            t0 = time.monotonic()
            p = testlib.run(cmd(name, 4, ["ZTRAIN_FAULT_HANG"], layout + ["comm.timeout_s=10"]),
                            check=False, env=testlib.mpi_env(ZTRAIN_FAULT_HANG=f"{hung}:2"), timeout=300)
            took = time.monotonic() - t0
            named = f"The job waits for rank {hung} (host {host}): it did not answer within 5 s" in p.stderr
            others = [r for r in range(4) if r != hung]
            wrongly = [r for r in others if f"The job waits for rank {r} " in p.stderr]
            expect(p.returncode != 0 and named and not wrongly,
                   f"rank {hung} hung: exit {p.returncode}, named {named}, wrongly named {wrongly}: {p.stderr[-1500:]}")
            fl = files(name)
            expect(sorted(fl) == others or (set(fl) >= {others[0]} and hung not in fl),
                   f"rank {hung} hung: flight files of ranks {sorted(fl)}, expected {others}")
            stuck = {}
            for r, f in fl.items():
                ents = f["entries"]
                expect(f["rank"] == r and f["host"] == host and len(ents) > 10 and f["why"],
                       f"rank {r}'s file: {str(f)[:300]}")
                open_ = [e for e in ents if e["end_unix_ms"] is None]
                if open_:
                    stuck[r] = (open_[0]["group"], open_[0]["op"], open_[0]["seq"], open_[0]["step"])
            line = next((ln for ln in p.stderr.splitlines() if "flight recorder: stuck in" in ln), "")
            print(f"rank {hung} hung in step 3 ({', '.join(layout)}): ended in {took:.1f} s (timeout 10 s); "
                  f"{line.strip()[:400]}")
            print(f"  files: ranks {sorted(fl)}; open collective per rank: {stuck}")
            expect(bool(stuck) and all(s[3] == 3 for s in stuck.values()),
                   f"rank {hung} hung: the files' open collectives are not step 3's: {stuck}")

        # ---- SIGUSR2: a look inside, and the run goes on
        name = "usr2"
        proc = subprocess.Popen(cmd(name, 2, ["ZTRAIN_FAULT_SLOW_HOST_MS"], ["train.log_every=1"], steps=200),
                                env=testlib.mpi_env(ZTRAIN_FAULT_SLOW_HOST_MS="20"),
                                stdout=open(os.path.join(work, "usr2.out"), "w"), stderr=subprocess.STDOUT, text=True)
        metrics = os.path.join(work, "run_" + name, "metrics.jsonl")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (os.path.exists(metrics) and os.path.getsize(metrics) > 2000):
            time.sleep(0.2)
        os.kill(proc.pid, signal.SIGUSR2)  # to mpirun, which forwards it to every rank
        proc.wait(timeout=600)
        with open(os.path.join(work, "usr2.out")) as f:
            out = err = f.read()
        fl = files(name)
        expect(proc.returncode == 0 and sorted(fl) == [0, 1] and all(f["why"] == "SIGUSR2" for f in fl.values())
               and "step 200/200" in out, f"SIGUSR2: exit {proc.returncode}, files {sorted(fl)}: {err[-600:]}")
        print(f"SIGUSR2 to mpirun: every rank's file written ({sorted(fl)}), the job ran to the end: exit {proc.returncode}")

        # ---- a fatal signal
        name = "segv"
        proc = subprocess.Popen(cmd(name, 2, [], steps=100000), env=testlib.mpi_env(), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        metrics = os.path.join(work, "run_" + name, "metrics.jsonl")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (os.path.exists(metrics) and os.path.getsize(metrics) > 2000):
            time.sleep(0.2)
        pids = testlib.children(proc.pid)
        if pids:
            os.kill(pids[-1], signal.SIGSEGV)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        fl = files(name)
        expect(proc.returncode != 0 and any(f["why"] == "SIGSEGV" and f["entries"] for f in fl.values()),
               f"SIGSEGV: exit {proc.returncode}, files {[(r, f['why']) for r, f in fl.items()]}")
        print(f"SIGSEGV to one rank: exit {proc.returncode}; files {[(r, f['why']) for r, f in fl.items()]}")

        p = testlib.run([args.ztrain, "train", spec("bad"), "--set", "comm.flight_entries=-1"], check=False)
        expect(p.returncode == 2 and "flight_entries" in p.stderr, f"bad flight_entries: {p.returncode} {p.stderr[-300:]}")
    return testlib.report(failures, "the flight recorder names the rank that never entered, and writes each rank's "
                                    "last collectives on a timeout, SIGUSR2 and a fatal signal")


if __name__ == "__main__":
    sys.exit(main())
