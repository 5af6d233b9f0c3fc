#!/usr/bin/python3
"""Kubernetes: deploy/kubernetes/mpijob.yaml (MPI Operator, MPIJob v2beta1) and job.yaml.
- tools/mpijob.py check passes the shipped MPIJob, and refuses planted mistakes, each naming it: a
  launcher that leaves the hostfile to the operator's OMPI_MCA_orte_* variables (which Open MPI 5
  ignores, mpi-operator #842), an -np that is not workers x slots, a misspelled field the API
  server would drop, two launchers;
- the launcher's own command, from the manifest (cut to 2 workers of 2 slots, as a user would
  for a small cluster), run for real: the hostfile and environment the operator would give it,
  rendered by tools/mpijob.py with the workers mapped to two hosts in network namespaces
  (tests/multihost/netns_hosts.py), its mpirun over them training a tiny model: the losses equal
  the single process's;
- job.yaml (one pod, no operator) is a batch/v1 Job whose command runs mpirun under the same
  SIGTERM -> SIGUSR1 trap.
Skips (exit 77) with the reason when namespaces cannot be made (not root, no ip) or PyYAML is absent.
"""
import copy
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tools"))
import testlib  # noqa: E402
from netns_hosts import Hosts  # noqa: E402


def main():
    args = testlib.arg_parser().parse_args()
    try:
        import yaml
    except ImportError:
        print("SKIP: PyYAML is not installed (Debian: python3-yaml)")
        return testlib.SKIP
    import mpijob
    failures, expect = testlib.checks(echo=True)
    manifest = os.path.join(REPO, "deploy", "kubernetes", "mpijob.yaml")
    p = subprocess.run([sys.executable, os.path.join(REPO, "tools", "mpijob.py"), "check", manifest],
                       capture_output=True, text=True)
    expect(p.returncode == 0, f"check of the shipped MPIJob: {p.returncode} {p.stderr}")
    job = mpijob.load(manifest)

    def launcher_args(j):
        return j["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["args"]

    def planted(what, edit, needle):
        j = copy.deepcopy(job)
        edit(j)
        found = mpijob.problems(j)
        print(f"planted {what}: {found[:1]}")
        expect(any(needle in f for f in found), f"planted {what}: not refused ({found})")

    planted("no --hostfile", lambda j: launcher_args(j).__setitem__(0, launcher_args(j)[0].replace(
        "--hostfile /etc/mpi/hostfile ", "")), "mpi-operator #842")
    planted("-np 8", lambda j: launcher_args(j).__setitem__(0, launcher_args(j)[0].replace("-np 16", "-np 8")),
            "-np 8 must be")
    planted("a misspelled field", lambda j: j["spec"].__setitem__("slotPerWorker", 8), "spec.slotPerWorker is not")
    planted("two launchers", lambda j: j["spec"]["mpiReplicaSpecs"]["Launcher"].__setitem__("replicas", 2),
            "Launcher.replicas must be 1")

    single = yaml.safe_load(open(os.path.join(REPO, "deploy", "kubernetes", "job.yaml")))
    script = " ".join(single["spec"]["template"]["spec"]["containers"][0]["args"])
    expect(single["apiVersion"] == "batch/v1" and single["kind"] == "Job" and "kill -USR1" in script
           and "mpirun" in script, f"job.yaml: {single.get('kind')} {script[:120]}")

    why = Hosts.unavailable()
    if why:
        print(f"SKIP (part): the launcher's run over hosts: several hosts cannot be made here: {why}")
        return testlib.report(failures, "the MPIJob manifests pass their checks and planted mistakes are refused")
    with testlib.workdir("zt_k8s_") as work, Hosts(work, 2) as hosts:
        data = testlib.make_byte_dataset(args.tokenize, os.path.join(work, "data"), 12000, 6)

        def spec(name):
            return testlib.tiny_spec(os.path.join(work, name + ".toml"), os.path.join(work, "run_" + name), data,
                                     model=testlib.TINY_MODEL,
                                     train={"micro_batch": 2, "global_batch": 8, "max_steps": 8, "log_every": 1},
                                     optim={"lr": 3e-3}, seed=5, comm__timeout_s=30,
                                     checkpoint__dir=os.path.join(work, "ck_" + name))

        # the manifest cut to 2 workers of 2 slots
        small = copy.deepcopy(job)
        small["spec"]["slotsPerWorker"] = 2
        a = launcher_args(small)
        a[0] = a[0].replace("-np 16", "-np 4").replace("ppr:8:node", "ppr:2:node")
        small["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"]["limits"][
            "nvidia.com/gpu"] = 2
        expect(not mpijob.problems(small), f"the 2 x 2 manifest: {mpijob.problems(small)}")
        argv, env = mpijob.render(small, os.path.join(work, "etc_mpi"), hosts=hosts.names)
        hostfile = os.path.join(work, "etc_mpi", "hostfile")
        print(f"rendered hostfile: {open(hostfile).read().strip()!r}; launcher: {' '.join(argv)}")
        spec_path = spec("k8s")
        subst = {mpijob.HOSTFILE: hostfile, "ztrain": args.ztrain, "/config/run.toml": spec_path}
        launched = [subst.get(x, x) for x in argv[1:]]
        # the harness's transport (its rsh agent into the namespaces, TCP on their subnet) in place
        # of the operator's ssh; the operator's ssh arguments do not apply to that agent
        base = hosts.mpirun(4, 2)
        at = base.index("mpirun")
        transport = base[at + 5:]
        run_env = testlib.mpi_env(**{k: v for k, v in env.items() if k != "OMPI_MCA_plm_rsh_args"})
        run_env["OMPI_MCA_orte_default_hostfile"] = hostfile
        p = subprocess.run([*base[:at], "mpirun", *transport, *launched], env=run_env, capture_output=True,
                           text=True, timeout=600)
        p1 = subprocess.run([args.ztrain, "train", spec("single")], capture_output=True, text=True, timeout=600)
        got = {r["step"]: r["loss"] for r in testlib.metrics(os.path.join(work, "run_k8s"), must_exist=False)}
        ref = {r["step"]: r["loss"] for r in testlib.metrics(os.path.join(work, "run_single"), must_exist=False)}
        same = len(ref) == 8 and got.keys() == ref.keys() and all(abs(got[k] - ref[k]) <= 1e-5 * ref[k] for k in ref)
        print(f"the launcher's mpirun over hosts {hosts.names} (2 ranks each): exit {p.returncode}; "
              f"8 losses equal the single process's: {same}")
        expect(p.returncode == 0 and p1.returncode == 0 and same,
               f"launcher run: exit {p.returncode}: {p.stderr[-1500:]} {sorted(got.items())[:3]} vs {sorted(ref.items())[:3]}")
    return testlib.report(failures, "the MPIJob manifest passes its checks, planted mistakes are refused, and its "
                                    "launcher command trains over two hosts as the single process does")


if __name__ == "__main__":
    sys.exit(main())
