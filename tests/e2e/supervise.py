#!/usr/bin/python3
"""`ztrain supervise`: reruns after a runtime failure, never after bad input.
- mpirun -np 2, checkpoints every 5 steps; rank 1 dies abruptly in step 17 (ZTRAIN_FAULT_EXIT,
  first attempt only): the supervisor reruns the job with --resume auto, it resumes from step 15
  and ends with the uninterrupted run's losses; one restart row in metrics.jsonl, one line saying
  why the attempt ended; exit 0. Prints the time from the rank's death to the resumed run's first
  step.
- bad input (exit 2): one attempt, exit 2; a command that always fails: 1 + max-restarts
  attempts, backoff doubling, the last status; a signal to the supervisor reaches the job, which
  checkpoints, and nothing is rerun; bad options exit 2.
Skips (exit 77) without mpirun.
"""
import os
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import testlib  # noqa: E402


def timed_run(cmd, env, on_line=None):
    """Runs cmd; returns (returncode, [(seconds since start, line)] of stdout and stderr)."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    lines, lock = [], threading.Lock()

    def read(stream):
        for ln in stream:
            with lock:
                lines.append((time.monotonic() - t0, ln.rstrip("\n")))
            if on_line:
                on_line(p, ln)
    threads = [threading.Thread(target=read, args=(s,), daemon=True) for s in (p.stdout, p.stderr)]
    for t in threads:
        t.start()
    rc = p.wait(timeout=600)
    for t in threads:
        t.join(timeout=10)
    return rc, sorted(lines)


def main():
    with testlib.mpi_test("zt_supervise_", 8000, 4) as (args, failures, expect, work, data):
        env = testlib.mpi_env()

        def spec(name, **over):
            return testlib.tiny_spec(os.path.join(work, name + ".toml"), os.path.join(work, "run_" + name), data,
                                     model=testlib.TINY_MODEL, train={"micro_batch": 2, "global_batch": 8,
                                                                      "max_steps": 30, "log_every": 1},
                                     optim={"lr": 3e-3}, seed=3, checkpoint__dir=os.path.join(work, "ck_" + name),
                                     checkpoint__every_steps=5, **over)

        def losses(name):
            return {r["step"]: r["loss"] for r in testlib.metrics(os.path.join(work, "run_" + name), must_exist=False)}

        supervise = [args.ztrain, "supervise", "--backoff", "0.5"]
        p = testlib.run([*testlib.mpirun(2), args.ztrain, "train", spec("ref")], check=False, env=env, timeout=600)
        expect(p.returncode == 0, f"reference run: {p.stderr[-600:]}")
        ref = losses("ref")

        # ---- a rank dies in step 17: rerun, resumed from step 15
        rc, lines = timed_run([*supervise, "--", *testlib.mpirun(2), args.ztrain, "train", spec("crash")],
                              dict(env, ZTRAIN_FAULT_EXIT="1:16"))
        text = "\n".join(ln for _, ln in lines)
        expect(rc == 0, f"supervised crash: exit {rc}: {text[-1500:]}")
        expect(losses("crash") == ref, "supervised crash: the losses differ from the uninterrupted run's")
        restarts = testlib.metrics(os.path.join(work, "run_crash"), "restart", must_exist=False)
        expect(len(restarts) == 1 and restarts[0]["attempt"] == 1 and restarts[0]["exit_status"] not in (0, 2),
               f"restart rows: {restarts}")
        expect("ztrain supervise: attempt 1 exited with status" in text and "rerunning in 0.5 s from the latest "
               "complete checkpoint" in text and "attempt 2 exited with status 0 (done); 2 attempts" in text,
               f"supervisor lines: {[ln for _, ln in lines if 'supervise' in ln]}")
        expect("resumed from" in text and "step_00000015" in text, "the rerun did not resume from step 15")
        # times from stderr lines (mpirun passes the ranks' stdout on in bursts)
        died = next((t for t, ln in lines if "fault injection: rank 1 exits" in ln), None)
        ended = next((t for t, ln in lines if "attempt 1 exited" in ln), None)
        resumed = next((t for t, ln in lines if "checkpoint: resumed from" in ln), None)
        if None not in (died, ended, resumed):
            print(f"a rank killed in step 17: the job ended {ended - died:.2f} s later; the rerun had resumed from "
                  f"step 15 {resumed - died:.2f} s after the kill (0.5 s of it the backoff); losses equal the "
                  f"uninterrupted run's: {losses('crash') == ref}")
        else:
            expect(False, "no fault, attempt-end or resume line in the supervised run's stderr")

        # ---- bad input: one attempt, exit 2
        bad = os.path.join(work, "bad.toml")
        with open(bad, "w") as f:
            f.write("[model]\nn_layer = -1\n")
        rc, lines = timed_run([*supervise, "--", args.ztrain, "train", bad], env)
        text = "\n".join(ln for _, ln in lines)
        expect(rc == 2 and "(bad input: not rerun); 1 attempt" in text, f"bad input: exit {rc}: {text[-600:]}")

        # ---- always failing: 1 + 2 attempts, the last status
        rc, lines = timed_run([args.ztrain, "supervise", "--max-restarts", "2", "--backoff", "0.1", "--",
                               "sh", "-c", "exit 3"], env)
        text = "\n".join(ln for _, ln in lines)
        expect(rc == 3 and "rerunning in 0.1 s" in text and "rerunning in 0.2 s" in text
               and "attempt 3 exited with status 3 (no restarts left); 3 attempts" in text,
               f"always failing: exit {rc}: {text[-600:]}")

        # ---- SIGTERM to the supervisor: the job checkpoints and exits 0, no rerun
        def stop_at_step_3(proc, line):
            if line.startswith("step 3/"):
                proc.send_signal(signal.SIGTERM)
        # (steps of 100 ms, so that it arrives mid-run; mpirun exits 1 after its ranks saved and exited 0:
        # docs/checkpoints.md, "Preemption")
        rc, lines = timed_run([*supervise, "--", *testlib.mpirun(2), args.ztrain, "train", spec("term")],
                              dict(env, ZTRAIN_FAULT_SLOW_HOST_MS="100"), stop_at_step_3)
        text = "\n".join(ln for _, ln in lines)
        expect(rc in (0, 1) and "stopped by SIGTERM after step" in text and "not rerun); 1 attempt" in text,
               f"SIGTERM: exit {rc}: {text[-800:]}")

        # ---- bad options
        for opts in (["--max-restarts", "-1"], ["--backoff", "0"], ["--backoff", "nan"], ["--frobnicate"], []):
            p = testlib.run([args.ztrain, "supervise", *opts, *([] if opts == [] else ["--", "true"])], check=False)
            expect(p.returncode == 2 and "supervise" in p.stderr, f"supervise {opts}: exit {p.returncode}: {p.stderr}")
        print("bad input: one attempt, exit 2; always failing: 3 attempts, backoff 0.1 then 0.2 s, exit 3; "
              "SIGTERM: forwarded, checkpoint, no rerun; bad options: exit 2")
    return testlib.report(failures, "supervise reruns runtime failures from the latest checkpoint, never bad input")


if __name__ == "__main__":
    sys.exit(main())
