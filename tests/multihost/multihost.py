#!/usr/bin/python3
"""Several machines, tested on this one (tests/multihost/netns_hosts.py: network namespaces with
their own addresses, host names and local directories; mpirun over TCP through an rsh agent).
- T2 D2 over 2 hosts x 2 ranks: the losses equal the single process's (within float
  reassociation), each tensor group inside a host (the ranks report hosts h1 and h2);
- a remote (HTTP) dataset, each host with its own cache_dir: every shard downloaded once per host
  (2 GETs each through a counting proxy), not once per rank (4);
- an s3:// checkpoint written from 2 hosts (each with its own local_dir) and resumed on 1 host
  (2 ranks, T2 D1): the resumed losses equal the uninterrupted single process's;
- a host whose link goes down (ip link set down) in the middle of a run: the job ends within the
  collective timeout with a message naming that host, and `ztrain supervise` reruns it on the
  hosts still reachable (the launch script drops the ones that do not answer), resuming from
  the last checkpoint to the end.
- tc netem delay between hosts: not provoked where the kernel has no netem (said so).
Skips (exit 77) with the reason when namespaces cannot be made (not root, no ip).
"""
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)
import testlib  # noqa: E402
from netns_hosts import Hosts  # noqa: E402


def losses(out_dir):
    return {r["step"]: r["loss"] for r in testlib.metrics(out_dir, must_exist=False)}


def main():
    args = testlib.arg_parser().parse_args()
    why = Hosts.unavailable()
    if why:
        print(f"SKIP: several hosts cannot be made here: {why}")
        return testlib.SKIP
    failures, expect = testlib.checks(echo=True)
    with testlib.workdir("zt_multihost_") as work, Hosts(work, 2) as hosts:
        env = testlib.mpi_env()
        data = testlib.make_byte_dataset(args.tokenize, os.path.join(work, "data"), 12000, 6)
        local = os.path.join(work, "local")  # each host's own directory under this one path

        def spec(name, data_=data, **over):
            return testlib.tiny_spec(os.path.join(work, name + ".toml"), os.path.join(work, "run_" + name), data_,
                                     model=testlib.TINY_MODEL,
                                     train={"micro_batch": 2, "global_batch": 8, "max_steps": 12, "log_every": 1},
                                     optim={"lr": 3e-3}, seed=5, **{"comm__timeout_s": 8, **over})

        def run(cmd, timeout=300):
            t0 = time.monotonic()
            p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
            return p, time.monotonic() - t0

        def train(name, np_=4, on=None, sets=(), spec_path=None):
            launcher = hosts.mpirun(np_, 2, on) if np_ > 1 else []
            return run([*launcher, args.ztrain, "train", spec_path or spec(name),
                        *[a for s in sets for a in ("--set", s)]])

        # ---- T2 D2 over 2 hosts x 2 ranks == the single process
        p1, _ = train("single", np_=1)
        p4, took = train("t2d2", sets=["parallel.tensor=2"])
        ref, got = losses(os.path.join(work, "run_single")), losses(os.path.join(work, "run_t2d2"))
        ranks = testlib.metrics(os.path.join(work, "run_t2d2"), "ranks", must_exist=False)
        seen = {e["host"] for r in ranks for e in r["slowest"]}
        same = len(ref) == 12 and set(got) == set(ref) and all(abs(got[k] - ref[k]) <= 1e-5 * abs(ref[k]) for k in ref)
        expect(p1.returncode == 0 and p4.returncode == 0 and same,
               f"T2 D2 over 2 hosts: exit {p4.returncode}, losses {sorted(got.items())[:3]} vs "
               f"{sorted(ref.items())[:3]}: {p4.stderr[-800:]}")
        expect(seen == {"h1", "h2"}, f"T2 D2 over 2 hosts: the ranks report hosts {seen}")
        print(f"T2 D2 over hosts {sorted(seen)} (2 ranks each, {took:.1f} s): 12 losses equal the single "
              f"process's (relative difference <= 1e-5, float reassociation in the data-parallel sum): {same}")

        # ---- ztrain doctor over 2 hosts x 2 ranks: the links inside and across machines apart, written
        # as a machine file of 2 GPUs a machine
        machine = os.path.join(work, "measured.toml")
        p, _ = run([*hosts.mpirun(4, 2), args.ztrain, "doctor", spec("doctor"), "--write-machine", machine])
        inside = re.search(r"PASS\s+inside machines\s+all-reduce ([\d.e+-]+)", p.stdout)
        across = re.search(r"PASS\s+across machines\s+all-reduce ([\d.e+-]+)", p.stdout)
        text = open(machine).read() if os.path.exists(machine) else ""
        expect(inside and across and "gpus_per_machine = 2" in text and "[network]" in text
               and re.search(r"collectives\s+4 ranks \(2 machines of 2\)", p.stdout),
               f"doctor over 2 hosts x 2 ranks: {p.stdout[-1500:]} {p.stderr[-600:]}")
        if inside and across:
            print(f"doctor over 2 hosts x 2 ranks: all-reduce bus bandwidth inside {inside.group(1)} GB/s, across "
                  f"{across.group(1)} GB/s; machine file with 2 GPUs a machine")

        # ---- a remote dataset: downloaded once per host, each host with its own cache_dir
        served = os.path.join(work, "served")
        testlib.run([args.tokenize, "shards", "--vocab", "byte", "--shard-tokens", "8000", "--out",
                     os.path.join(served, "shards"), os.path.join(work, "data", "input.txt")])
        http_port = testlib.free_port()
        servers = [subprocess.Popen([sys.executable, "-m", "http.server", str(http_port), "--bind", "127.0.0.1",
                                     "--directory", served], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
        try:
            testlib.wait_port(http_port)
            proxy, proxy_port = testlib.start_fault_proxy(http_port, 0.0, host=hosts.gateway)
            servers.append(proxy)
            remote = f"http://{hosts.gateway}:{proxy_port}/shards"
            p, _ = train("http", sets=["parallel.tensor=2", f"data.cache_dir={local}/cache"],
                         spec_path=spec("http", data_=remote))
            gets = testlib.proxy_stats(proxy_port, host=hosts.gateway)["gets"]
            shard_gets = {k: v for k, v in gets.items() if k.endswith(".ztok")}
            expect(p.returncode == 0 and len(shard_gets) > 2 and set(shard_gets.values()) == {2},
                   f"a remote dataset on 2 hosts: exit {p.returncode}, GETs per shard {shard_gets}: {p.stderr[-600:]}")
            per_host = {h: sorted(os.listdir(os.path.join(work, h, "local", "cache"))) for h in hosts.names}
            print(f"an HTTP dataset on 2 hosts x 2 ranks: GETs per shard {sorted(set(shard_gets.values()))} "
                  f"({len(shard_gets)} shards); each host's cache_dir: {per_host}")
        finally:
            testlib.stop(servers)

        # ---- an s3:// checkpoint written from 2 hosts (each its own local_dir), resumed on 1 host
        if not testlib.s3rver_path():
            print("SKIP (s3:// checkpoint): s3rver not installed (npm ci in tests/data)")
        else:
            s3, s3_port = testlib.start_s3rver(os.path.join(work, "s3"), "ck", host=hosts.gateway)
            try:
                env.update(AWS_ACCESS_KEY_ID=testlib.S3_KEY, AWS_SECRET_ACCESS_KEY=testlib.S3_KEY)
                s3_sets = [f"data.s3_endpoint=http://{hosts.gateway}:{s3_port}", "data.s3_path_style=true",
                           "checkpoint.dir=s3://ck/run", f"checkpoint.local_dir={local}/ckpt",
                           "checkpoint.every_steps=3"]
                p, _ = train("s3_write", sets=["parallel.tensor=2", "checkpoint.exit_after=6", *s3_sets])
                per_host = {h: sorted(os.listdir(os.path.join(work, h, "local", "ckpt", "step_00000006")))
                            for h in hosts.names
                            if os.path.isdir(os.path.join(work, h, "local", "ckpt", "step_00000006"))}
                left = os.listdir(os.path.join(work, "h2", "local", "ckpt"))
                expect(p.returncode == 0 and not [d for d in left if ".tmp-" in d],
                       f"s3:// checkpoint from 2 hosts: exit {p.returncode}, left on h2: {left}: {p.stderr[-800:]}")
                # resumed on h1 alone (2 ranks, T2 D1), whose local copy holds only its own ranks' files
                p, _ = train("s3_resume", np_=2, on=["h1"], sets=["parallel.tensor=2", "checkpoint.resume=auto", *s3_sets],
                             spec_path=spec("s3_write", run__out_dir=os.path.join(work, "run_s3_write")))
                resumed = losses(os.path.join(work, "run_s3_write"))
                ok = p.returncode == 0 and "resumed from" in p.stderr and all(
                    abs(resumed.get(k, 1e9) - ref[k]) <= 1e-5 * abs(ref[k]) for k in range(7, 13))
                line = next((ln for ln in p.stderr.splitlines() if "resumed from" in ln), "")
                expect(ok, f"resumed on 1 host: exit {p.returncode}: {line}: {sorted(resumed.items())} vs {sorted(ref.items())}: {p.stderr[-1500:]}")
                print(f"s3:// checkpoint written from 2 hosts (local copies {per_host}), resumed on h1 with 2 ranks: "
                      f"steps 7-12 equal the single process's: {ok}; {line.split('] ', 1)[-1]}")
            finally:
                testlib.stop([s3])
        # ---- a host's link goes down mid-run; the supervisor reruns on the hosts that answer
        probe_port = testlib.free_port()
        probe = subprocess.Popen([sys.executable, "-m", "http.server", str(probe_port), "--bind", hosts.gateway],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=work)
        try:
            testlib.wait_port(probe_port, host=hosts.gateway)
            launch = hosts.launch_script(os.path.join(work, "launch.sh"), 2, probe_port,
                                         forward=["ZTRAIN_FAULT_SLOW_HOST_MS"])
            lost = spec("lost", train__max_steps=40, parallel__tensor=2, comm__timeout_s=3,
                        checkpoint__dir=os.path.join(work, "ck_lost"), checkpoint__every_steps=5)
            p_ref, _ = run([args.ztrain, "train", spec("lost_ref", train__max_steps=40)])
            sup_env = dict(env, ZTRAIN=args.ztrain, ZTRAIN_FAULT_SLOW_HOST_MS="100")  # steps of ~0.1 s
            proc = subprocess.Popen([args.ztrain, "supervise", "--max-restarts", "2", "--backoff", "1", "--",
                                     launch, "train", lost], env=sup_env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True)
            out = testlib.LineWatcher(proc.stdout)
            reached = out.wait_for("step 12/40", 120)
            hosts.link("h2", False)
            cut = time.monotonic()
            ended = out.wait_for("attempt 1", 120)  # the supervisor's line on how the attempt ended
            ended_s = time.monotonic() - cut
            try:
                rc = proc.wait(timeout=300)
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = None
            text = out.text()
            named = [ln for ln in text.splitlines() if "h2" in ln and ("node h2" in ln or "(host h2)" in ln)]
            resumed = next((ln for ln in text.splitlines() if "resumed from" in ln), "")
            got_l, ref_l = losses(os.path.join(work, "run_lost")), losses(os.path.join(work, "run_lost_ref"))
            tail_ok = p_ref.returncode == 0 and all(abs(got_l.get(k, 1e9) - ref_l[k]) <= 1e-5 * abs(ref_l[k])
                                                    for k in range(36, 41))
            restarts = testlib.metrics(os.path.join(work, "run_lost"), "restart", must_exist=False)
            expect(reached and ended and ended_s < 30 and bool(named), f"a lost host: the job did not end naming h2 "
                                                                      f"({ended_s:.1f} s after the cut): {text[-1500:]}")
            expect(rc == 0 and "launch: hosts that answer: h1\n" in text and "written by 4 ranks" in resumed
                   and len(restarts) == 1 and tail_ok,
                   f"a lost host: the rerun on h1: exit {rc}, {resumed}, restarts {restarts}: {text[-1500:]}")
            print(f"h2's link cut at step 12: the job ended {ended_s:.1f} s later naming it ({named[0].strip()}); "
                  f"the supervisor's rerun on h1 alone: {resumed.split('] ', 1)[-1]}; exit {rc}, steps 36-40 equal "
                  f"the uninterrupted single process's: {tail_ok}")
        finally:
            testlib.stop([probe])
        # ---- 20 ms between hosts (tc netem on each host's link) does not change the losses
        hosts.link("h2", True)
        delayed = [subprocess.run(["tc", "qdisc", "add", "dev", hosts.veth[h], "root", "netem", "delay", "20ms"],
                                  capture_output=True, text=True) for h in hosts.names]
        if any(d.returncode != 0 for d in delayed):
            print(f"SKIP (tc netem delay between hosts): {delayed[0].stderr.strip()} (this kernel has no netem "
                  f"qdisc)")
        else:
            p, took = train("delay", sets=["parallel.tensor=2"])
            got = losses(os.path.join(work, "run_delay"))
            same = all(abs(got.get(k, 1e9) - ref[k]) <= 1e-5 * abs(ref[k]) for k in ref)
            expect(p.returncode == 0 and same, f"20 ms between hosts: exit {p.returncode}: {p.stderr[-600:]}")
            print(f"20 ms between hosts (tc netem): {took:.1f} s, the losses equal the single process's: {same}")
        for h in hosts.names:
            subprocess.run(["tc", "qdisc", "del", "dev", hosts.veth[h], "root"], capture_output=True)
    return testlib.report(failures, "several hosts (network namespaces): layouts, caches, checkpoints, a lost host")


if __name__ == "__main__":
    sys.exit(main())
