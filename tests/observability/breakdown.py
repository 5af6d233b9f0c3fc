#!/usr/bin/python3
"""The step breakdown, MFU and time left (issue 13), on the CPU backend:
- every logged train record has data wait, forward, backward, optimizer, exposed communication,
  checkpoint stall, offload and other (ms) that add up to step_ms within 10%, with "other" a small
  remainder (the phases cover the step), an MFU in (0, 1] and a time left that falls to 0;
- the progress line shows the shares, the MFU and the time left;
- under mpirun with ZeRO-3 the exposed communication is measured (> 0), and a checkpoint save's
  stall lands in the next step's checkpoint_ms;
- [run] trace_steps writes a valid Chrome trace per rank with each traced step's phases in order;
- with NVMe offload, the time blocked in offload I/O and transfers is measured (offload_ms),
  each wait is an event on the trace's offload track, and "memory" rows give bytes per tier;
- [run] telemetry_s writes "device" rows (on the CPU: process utilization and resident memory);
- `ztrain report` draws a PNG dashboard from a real run's metrics.jsonl.
"""
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import testlib  # noqa: E402

failures, expect = testlib.checks()
PARTS = ("data_wait_ms", "forward_ms", "backward_ms", "optimizer_ms", "comm_ms", "checkpoint_ms", "offload_ms",
         "other_ms")


def spec(work, data, out, **over):
    return testlib.tiny_spec(os.path.join(work, out + ".toml"), os.path.join(work, out), data, seed=3,
                             model={"n_layer": 2, "n_head": 4, "d_model": 64, "vocab_size": 257, "seq_len": 64},
                             train={"micro_batch": 4, "global_batch": 8, "max_steps": 12, "log_every": 2},
                             optim={"lr": 1e-3}, **over)


def check_records(name, recs):
    expect(len(recs) >= 5, f"{name}: {len(recs)} train records")
    for r in recs:
        missing = [k for k in PARTS + ("mfu", "eta_s") if k not in r]
        if missing:
            failures.append(f"{name}: step {r['step']} lacks {missing}")
            return
        total = sum(r[k] for k in PARTS)
        expect(abs(total - r["step_ms"]) <= 0.1 * r["step_ms"],
               f"{name}: step {r['step']}: parts add to {total:.3f} ms, step {r['step_ms']:.3f} ms")
        expect(all(r[k] >= 0 for k in PARTS), f"{name}: negative part in {r}")
        expect(0 < r["mfu"] <= 1, f"{name}: mfu {r['mfu']}")
    later = recs[1:]  # the first step pays for warm-up
    other = sum(r["other_ms"] for r in later) / max(sum(r["step_ms"] for r in later), 1e-9)
    expect(other < 0.1, f"{name}: 'other' is {100 * other:.0f}% of the step time: the phases miss something")
    expect(recs[-1]["eta_s"] == 0 and recs[0]["eta_s"] > 0, f"{name}: time left {recs[0]['eta_s']} -> {recs[-1]['eta_s']}")
    share = {k: sum(r[k] for r in later) / sum(r["step_ms"] for r in later) for k in PARTS}
    print(f"{name}: " + ", ".join(f"{k[:-3]} {100 * v:.0f}%" for k, v in share.items()) +
          f"; MFU {100 * recs[-1]['mfu']:.1f}%")
    return share


def main():
    args = testlib.arg_parser().parse_args()
    with testlib.workdir("zt_obs_") as work:
        data = testlib.make_byte_dataset(args.tokenize, os.path.join(work, "data"), 20000, 4)
        p = testlib.run([args.ztrain, "train", spec(work, data, "single")], check=False)
        expect(p.returncode == 0, f"single: exit {p.returncode}: {p.stderr[-500:]}")
        if p.returncode == 0:
            check_records("single process", testlib.metrics(os.path.join(work, "single")))
            line = [l for l in p.stdout.splitlines() if l.startswith("step 12/12")]
            expect(line and "MFU" in line[0] and "fwd" in line[0] and "comm" in line[0] and "left 0s" in line[0],
                   f"progress line: {line}")
            expect("MFU against" in p.stderr and "GEMM probe" in p.stderr, "the MFU peak is not named in the log")
        # offload: the time blocked in NVMe I/O and host<->device transfers is its own part, and
        # each wait an event on the trace's offload track
        p = testlib.run([args.ztrain, "train", spec(work, data, "offload", parallel__zero_stage=3,
                                                    offload__optimizer="nvme", offload__params="nvme",
                                                    offload__nvme_path=work, run__trace_steps="3")], check=False)
        expect(p.returncode == 0, f"offload: exit {p.returncode}: {p.stderr[-500:]}")
        if p.returncode == 0:
            share = check_records("NVMe offload, ZeRO-3", testlib.metrics(os.path.join(work, "offload")))
            expect(share and share["offload_ms"] > 0, "offload: no offload time measured")
            mem = testlib.metrics(os.path.join(work, "offload"), "memory")
            expect(mem and mem[-1]["nvme"]["optimizer"] > 0 and mem[-1]["nvme"]["params"] > 0
                   and mem[-1]["pinned_host"]["grads"] > 0 and mem[-1]["device"]["peak"] > 0,
                   f"memory rows by tier: {mem[-1:] if mem else 'none'}")
            if mem:
                print(f"memory row: device peak {mem[-1]['device']['peak']} B, pinned {mem[-1]['pinned_host']}, "
                      f"nvme {mem[-1]['nvme']}")
            ev = [e for e in json.load(open(os.path.join(work, "offload", "trace.rank0.json")))["traceEvents"]
                  if e["ph"] == "X" and e["tid"] == 3]
            kinds = {e["name"] for e in ev}
            expect({"offload nvme read", "offload nvme write", "offload parameters from nvme"} <= kinds,
                   f"offload trace events: {sorted(kinds)}")
            print(f"offload trace: {len(ev)} events on the offload track: {sorted(kinds)}")
        # device telemetry: on the CPU, this process's utilization and resident memory, 10 times a second
        p = testlib.run([args.ztrain, "train", spec(work, data, "telemetry", run__telemetry_s=0.1, train__max_steps=60,
                                                    train__log_every=100)], check=False)
        rows = testlib.metrics(os.path.join(work, "telemetry"), "device") if p.returncode == 0 else []
        expect(len(rows) >= 3 and all(0 < r["cpu_util"] <= 1.5 and r["rss_bytes"] > 0 for r in rows[1:]),
               f"telemetry: {p.returncode} {rows[:3]} {p.stderr[-300:]}")
        if rows:
            print(f"telemetry: {len(rows)} device rows, CPU utilization {rows[-1]['cpu_util']:.2f}, "
                  f"resident {rows[-1]['rss_bytes'] / 2 ** 20:.0f} MiB")
        # the dashboard of that run
        if shutil.which("gnuplot"):
            png = os.path.join(work, "dash.png")
            p = testlib.run([args.ztrain, "report", os.path.join(work, "telemetry"), "--out", png], check=False)
            ok = p.returncode == 0 and os.path.exists(png) and os.path.getsize(png) > 10000
            expect(ok and open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n", f"report: {p.returncode} {p.stderr[-300:]}")
            if ok:
                print(f"report: {os.path.getsize(png)} bytes of PNG")
        else:
            print("SKIP (report): gnuplot not found (Debian: gnuplot-nox)")
        p = testlib.run([args.ztrain, "report", work], check=False)
        expect(p.returncode == 2 and "no metrics.jsonl" in p.stderr, f"report of a non-run dir: {p.returncode} {p.stderr}")
        if shutil.which("mpirun"):
            p = testlib.run([*testlib.mpirun(2), args.ztrain, "train",
                             spec(work, data, "zero3", parallel__zero_stage=3, checkpoint__dir=os.path.join(work, "ck"),
                                  checkpoint__every_steps=3, checkpoint__async=False, run__trace_steps="5-6",
                                  train__global_batch=16)], check=False)
            expect(p.returncode == 0, f"zero3: exit {p.returncode}: {p.stderr[-500:]}")
            if p.returncode == 0:
                recs = testlib.metrics(os.path.join(work, "zero3"))
                share = check_records("2 ranks, ZeRO-3, checkpoints every 3 steps", recs)
                expect(share and share["comm_ms"] > 0, "ZeRO-3 on 2 ranks: no exposed communication measured")
                # saves after steps 3, 6, 9 (synchronous): their stall is in steps 4, 7, 10
                ck = {r["step"]: r["checkpoint_ms"] for r in recs}
                expect(ck.get(4, 0) > 0 and ck.get(10, 0) > 0 and ck.get(2, 1) == 0,
                       f"checkpoint stall not carried to the next step: {ck}")
                # the trace of steps 5-6: per rank, each micro-batch's forward/backward/data wait
                for rank in (0, 1):
                    path = os.path.join(work, "zero3", f"trace.rank{rank}.json")
                    if not os.path.exists(path):
                        failures.append(f"trace: {path} missing")
                        continue
                    ev = [e for e in json.load(open(path))["traceEvents"] if e["ph"] == "X"]
                    names = {}
                    for e in ev:
                        names.setdefault((e["args"]["step"], e["name"]), []).append(e)
                    for step in (5, 6):  # global batch 16 = 2 ranks x 2 micro-batches of 4
                        for name, count in (("forward", 2), ("backward", 2), ("data wait", 2), ("optimizer", 1),
                                            ("gradient reduction + loss", 1)):
                            got = names.get((step, name), [])
                            expect(len(got) == count and all(e["dur"] >= 0 and e["pid"] == rank for e in got),
                                   f"trace rank {rank} step {step}: {len(got)} '{name}' events, expected {count}")
                    coll = [e for e in ev if e["tid"] == 2]
                    expect(any("all_gather" in e["name"] for e in coll) and any("reduce_scatter" in e["name"] for e in coll),
                           f"trace rank {rank}: ZeRO-3's gathers and reduce-scatters missing: {sorted({e['name'] for e in coll})}")
                    fb = sorted((e for e in ev if e["tid"] == 0), key=lambda e: e["ts"])
                    expect(all(a["ts"] + a["dur"] <= b["ts"] + 1 for a, b in zip(fb, fb[1:])),
                           f"trace rank {rank}: compute events overlap")
                    expect(not any(e["args"]["step"] not in (5, 6) for e in ev), f"trace rank {rank}: other steps traced")
                print("trace: steps 5-6 on both ranks, each micro-batch's phases in order")
            # hybrid sharding: the exposed communication by group, and the replicas' all-reduce traced
            p = testlib.run([*testlib.mpirun(2), args.ztrain, "train",
                             spec(work, data, "hybrid", parallel__zero_stage=3, parallel__replicate=2,
                                  run__trace_steps="3", train__global_batch=16)], check=False)
            expect(p.returncode == 0, f"hybrid: exit {p.returncode}: {p.stderr[-500:]}")
            if p.returncode == 0:
                recs = [r for r in testlib.metrics(os.path.join(work, "hybrid")) if r.get("comm_ms", 0) > 0]
                by = recs[-1].get("comm_ms_by_group", {}) if recs else {}
                expect(set(by) == {"world", "tp", "dp", "shard", "replica"}
                       and abs(sum(by.values()) - recs[-1]["comm_ms"]) <= 1e-3 * max(1.0, recs[-1]["comm_ms"]),
                       f"hybrid: comm_ms_by_group {by} against comm_ms {recs[-1]['comm_ms'] if recs else None}")
                ev = json.load(open(os.path.join(work, "hybrid", "trace.rank0.json")))["traceEvents"]
                waits = sorted({e["name"] for e in ev if e.get("tid") == 2})
                expect(any(n.startswith("replica") and "all_reduce" in n for n in waits),
                       f"hybrid: no wait on the replicas' all-reduce traced: {waits}")
                print(f"hybrid sharding, 2 replicas: exposed communication by group {by}; traced waits {waits}")
        else:
            print("SKIP (multi-rank part): mpirun not found")
    return testlib.report(failures, "the step breakdown adds up and names where the time went")


if __name__ == "__main__":
    sys.exit(main())
