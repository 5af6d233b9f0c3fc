#!/usr/bin/python3
"""The comm layer's fixes on the emulated device (2-4 ranks under mpirun, each an emulated GPU,
over the emulated NCCL), each checked against the failure it prevents:

1. wait() makes the compute stream wait for the collective on the device (the host goes on): T1 D2
   ZeRO-3 equals the CPU's single process; with the stream wait skipped
   (ZTRAIN_FAULT_SKIP_COMM_STREAM_WAIT=1) the emulated streams corrupt the result.
2. The exposed communication comes from device events: with rank 1's host 1.5 s late each step,
   rank 0's breakdown shows at least 0.6 s of communication a step (its host never blocks; it
   computes during part of the delay).
3. The collective order check (on in every test run through testlib.mpi_env): a rank that swaps
   two collectives of different groups in step 2 (ZTRAIN_FAULT_SWAP_COLLECTIVES=1:1, 0-based) ends the job,
   the message naming the step, the rank and the collective; on the emulated NCCL (T2 D2 ZeRO-3)
   and on the CPU backend's MPI.
4. No cudaFree with a collective in flight: ZeRO-3 under a [run] device_memory_limit that makes
   the caching allocator give its cache back mid-step (the emulated runtime faults a cudaFree,
   cudaFreeHost or cudaHostAlloc issued while an emulated NCCL collective runs).
5. kill -9 of a rank held before its communicator init ends the job within [comm] timeout_s.

usage: comm_fixes.py --ztrain ZTRAIN --tokenize TOKENIZE --plugin LIBZTRAIN_CUDA_EMU --nccl LIBZTRAIN_NCCL_EMU
"""
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import testlib  # noqa: E402

h5py, np = testlib.require("h5py", "numpy")
failures, expect = testlib.checks(echo=True)
GPT2 = {"n_layer": 2, "n_head": 2, "d_model": 32, "d_ff": 128, "vocab_size": 260, "seq_len": 16}
TOL = 1e-4


def main():
    setup = testlib.emulated_gpus(testlib.arg_parser())
    if setup is None:
        return 77
    args, env = setup
    with tempfile.TemporaryDirectory() as work:
        data = testlib.make_byte_dataset(args.tokenize, os.path.join(work, "data"), 20000, 5)

        def spec_for(name, device, train=None, **over):
            out = os.path.join(work, name)
            t = {"micro_batch": 2, "global_batch": 4, "max_steps": 3, "log_every": 1, **(train or {})}
            return out, testlib.tiny_spec(out + ".toml", out, data, GPT2, t, optim={"lr": 3e-3, "warmup_steps": 1},
                                          seed=3, device=device, precision__compute="fp32",
                                          comm__backend="nccl" if device == "cuda" else "auto", **over)

        def dump(name, ranks, sets, device, extra_env=None):
            out, spec = spec_for(name, device)
            p = testlib.dump_state(args.ztrain, spec, out + ".h5", 2, sets, ranks, dict(env, **(extra_env or {})))
            return (h5py.File(out + ".h5", "r") if p.returncode == 0 else None), p

        # 1. the stream wait
        ref, p = dump("single", 1, [], "cpu")
        expect(ref is not None, f"single CPU process: exit {p.returncode}: {p.stderr[-800:]}")
        z3 = ["parallel.zero_stage=3"]
        good, p = dump("z3", 2, z3, "cuda")
        expect(good is not None, f"T1 D2 ZeRO-3: exit {p.returncode}: {p.stderr[-800:]}")
        bad, p_bad = dump("z3_no_stream_wait", 2, z3, "cuda", {"ZTRAIN_FAULT_SKIP_COMM_STREAM_WAIT": "1"})
        if ref is not None and good is not None:
            loss, steps, grads, finals = testlib.dump_differences(good, ref)
            worst = max(max(grads.values()), max(finals.values()), loss, steps)
            print(f"T1 D2 ZeRO-3 on 2 emulated GPUs: worst difference to one CPU process {worst:.1e}", flush=True)
            expect(worst <= 1e-3, f"T1 D2 ZeRO-3 differs from one process by {worst:.2e}")
            if bad is None:
                print(f"without the stream wait: the run failed (exit {p_bad.returncode})", flush=True)
            else:
                loss, steps, grads, finals = testlib.dump_differences(bad, ref)
                worst_bad = max(max(grads.values()), max(finals.values()), loss, steps)
                print(f"without the stream wait: worst difference {worst_bad:.1e}", flush=True)
                expect(worst_bad > 1e-2, f"skipping the stream wait went unnoticed (worst difference {worst_bad:.2e})")

        # 2. exposed communication from device events: rank 1's host is late each step
        late_ms = 1500  # longer than a step's compute here: most of it must show as a stall
        out, spec = spec_for("late_rank", "cuda", {"max_steps": 4})
        late = (f'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then export ZTRAIN_FAULT_SLOW_HOST_MS={late_ms}; fi; '
                f"exec {shlex.quote(args.ztrain)} train {shlex.quote(spec)}")
        p = testlib.run(testlib.mpirun(2) + ["sh", "-c", late], check=False, env=env, timeout=600)
        recs = testlib.metrics(out, must_exist=False)
        comm = [r["comm_ms"] for r in recs[1:]]  # the first step also holds the start-up
        print(f"rank 1 {late_ms} ms late each step: rank 0's exposed communication {[round(c) for c in comm]} ms",
              flush=True)
        # (rank 0 computes during part of the delay; without device events the stall reads as 0)
        expect(p.returncode == 0 and comm and min(comm) >= 0.4 * late_ms,
               f"exposed communication of a late peer: exit {p.returncode}, {comm}: {p.stderr[-600:]}")

        # 3. the collective order check names a swapped pair
        for device, ranks, sets in (("cuda", 4, ["parallel.tensor=2", "parallel.zero_stage=3"]),
                                    ("cpu", 4, ["parallel.tensor=2", "parallel.zero_stage=3"])):
            out, spec = spec_for(f"swap_{device}", device, {"micro_batch": 1})
            p = testlib.run(testlib.train_cmd(args.ztrain, spec, sets, ranks), check=False, timeout=600,
                            env=dict(env, ZTRAIN_FAULT_SWAP_COLLECTIVES="1:1"))
            named = [ln for ln in p.stderr.splitlines() if "collective order differs between ranks in step 2" in ln]
            # rank 1 named, by itself or by another rank: whichever rank reports first ends the job
            # (its MPI_Abort may kill rank 1 before it prints), so no particular rank's line is required
            by_rank1 = any(("rank 1:" in ln and "this rank's collective #" in ln and "where rank 0 issued" in ln)
                           or "rank 1 differs from rank 0 first at collective #" in ln for ln in named)
            print(f"T2 D2 ZeRO-3 on {ranks} x {device}, rank 1 swapping two collectives in step 2: exit "
                  f"{p.returncode}; {named[:1]}", flush=True)
            expect(p.returncode != 0 and by_rank1, f"swap on {device}: exit {p.returncode}: {p.stderr[-1200:]}")
            done = [r["step"] for r in testlib.metrics(out, must_exist=False)]
            expect(done == [1], f"swap on {device}: steps done {done} (step 1 must pass the check, step 2 not)")

        # 4. the allocator gives its cache back mid-step with collectives in flight
        out, spec = spec_for("tight", "cuda", {"max_steps": 2}, parallel__zero_stage=3,
                             run__device_memory_limit="0.85MiB")  # peak 0.79 MiB: the cache goes back
        p = testlib.run(testlib.mpirun(2) + [args.ztrain, "train", spec], check=False, env=env, timeout=600)
        faulted = "NCCL collective(s) are in flight" in p.stderr
        print(f"ZeRO-3 under a tight device memory limit: exit {p.returncode}, cudaFree with collectives in flight: "
              f"{faulted}", flush=True)
        expect(p.returncode == 0 and not faulted, f"tight limit: exit {p.returncode}: {p.stderr[-1000:]}")

        # 5. kill -9 of a rank held before its communicator init
        timeout_s = 60  # far longer than the job may take to end: the kill ends it, not the timeout
        out, spec = spec_for("killed_in_init", "cuda", comm__timeout_s=timeout_s)
        job = subprocess.Popen(testlib.mpirun(2) + [args.ztrain, "train", spec], text=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, env=dict(env, ZTRAIN_FAULT_HOLD_COMM_INIT="1:120"))
        hook = "waits 120 s before its communicator init"
        err = testlib.LineWatcher(job.stderr)
        seen = err.wait_for(hook, 300)  # rank 1 is held; rank 0 has begun its init
        time.sleep(1)
        ranks = testlib.children(job.pid)
        t0 = time.time()
        if len(ranks) == 2:
            os.kill(ranks[-1], signal.SIGKILL)
        try:
            job.wait(timeout=timeout_s + 60)
        except subprocess.TimeoutExpired:
            job.kill()
            job.wait()
        took = time.time() - t0
        print(f"kill -9 of rank 1 before its communicator init: exit {job.returncode} after {took:.1f} s", flush=True)
        expect(seen and len(ranks) == 2 and job.returncode != 0 and took < 20,
               f"killed in init: ranks {ranks}, exit {job.returncode} after {took:.1f} s: {err.text()[-800:]}")
    return testlib.report(failures, "comm fixes on the emulated device: stream waits, exposed time from device "
                                    "events, the collective order check, no cudaFree in flight, kill -9 in init")


if __name__ == "__main__":
    sys.exit(main())
