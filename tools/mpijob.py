#!/usr/bin/python3
"""Kubernetes MPIJob manifests for ztrain (deploy/kubernetes/mpijob.yaml), checked and rendered
before they reach a cluster.

  tools/mpijob.py check MANIFEST...
      the MPIJob v2beta1 schema's checks (written from the MPI Operator's published CRD: required
      fields, types, enums; checked against its v0.8.2 CRD, manifests/base/kubeflow.org_mpijobs.yaml;
      unknown fields, which the API server would prune silently, refused)
      and ztrain's: the launcher names the operator's hostfile itself (Open MPI 5 ignores the
      injected OMPI_MCA_orte_* variables, mpi-operator #842), -np = workers x slotsPerWorker, a
      worker's GPUs = its slots, a termination grace period for the preemption save.
      Exit 0, or 2 with one line per problem.
  tools/mpijob.py render MANIFEST --out DIR [--namespace NS] [--hosts H1,H2,...]
      what the operator gives the launcher: DIR/hostfile (one line per worker, "NAME slots=N",
      the worker's DNS name, or with --hosts the given host names) and DIR/env (the Open MPI
      variables it injects); prints the launcher's mpirun command as JSON.
Needs PyYAML (Debian: python3-yaml).
"""
import argparse
import json
import os
import re
import shlex
import sys

HOSTFILE = "/etc/mpi/hostfile"  # where the operator mounts the hostfile (its configMountPath)
ENUMS = {
    "mpiImplementation": ("OpenMPI", "Intel", "MPICH"),
    "launcherCreationPolicy": ("AtStartup", "WaitForWorkersReady"),
    "cleanPodPolicy": ("None", "Running", "All"),
}
SPEC_KEYS = {"slotsPerWorker", "runPolicy", "mpiReplicaSpecs", "sshAuthMountPath", "launcherCreationPolicy",
             "mpiImplementation", "runLauncherAsWorker"}
RUN_POLICY = {"cleanPodPolicy": str, "ttlSecondsAfterFinished": int, "activeDeadlineSeconds": int,
              "backoffLimit": int, "suspend": bool, "managedBy": str, "schedulingPolicy": dict}
REPLICA_KEYS = {"replicas", "template", "restartPolicy"}


def load(path):
    import yaml
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d is not None]
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise SystemExit(f"{path}: expected one YAML document (an MPIJob)")
    return docs[0]


def launcher_mpirun(job):
    """The launcher's mpirun argv: from its command and args (a `bash -c` script's mpirun ... up to
    the `&` or end of the command that runs it)."""
    c = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    text = " ".join(list(c.get("command") or []) + list(c.get("args") or []))
    m = re.search(r"\bmpirun\b[^&;|]*", text)
    return shlex.split(m.group(0)) if m else []


def problems(job):
    out = []

    def need(cond, msg):
        if not cond:
            out.append(msg)
        return cond

    need(job.get("apiVersion") == "kubeflow.org/v2beta1", "apiVersion must be kubeflow.org/v2beta1")
    need(job.get("kind") == "MPIJob", "kind must be MPIJob")
    name = (job.get("metadata") or {}).get("name")
    need(isinstance(name, str) and re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", name or ""),
         "metadata.name must be a DNS label (lowercase letters, digits and '-', at most 63): it names the workers' hosts")
    spec = job.get("spec")
    if not need(isinstance(spec, dict), "spec is required"):
        return out
    for k in spec:
        need(k in SPEC_KEYS, f"spec.{k} is not an MPIJob v2beta1 field (the API server would drop it)")
    slots = spec.get("slotsPerWorker", 1)
    need(isinstance(slots, int) and not isinstance(slots, bool) and 1 <= slots < 2 ** 31,
         "spec.slotsPerWorker must be an integer >= 1 (int32)")
    need(isinstance(spec.get("sshAuthMountPath", ""), str), "spec.sshAuthMountPath must be a string")
    need(isinstance(spec.get("runLauncherAsWorker", False), bool), "spec.runLauncherAsWorker must be true or false")
    for k in ("mpiImplementation", "launcherCreationPolicy"):
        if k in spec:
            need(spec[k] in ENUMS[k], f"spec.{k} must be one of {', '.join(ENUMS[k])}")
    rp = spec.get("runPolicy", {})
    if need(isinstance(rp, dict), "spec.runPolicy must be an object"):
        for k, v in rp.items():
            if need(k in RUN_POLICY, f"spec.runPolicy.{k} is not a RunPolicy field"):
                need(isinstance(v, RUN_POLICY[k]) and not (RUN_POLICY[k] is int and isinstance(v, bool)),
                     f"spec.runPolicy.{k} must be {RUN_POLICY[k].__name__}")
        if "cleanPodPolicy" in rp:
            need(rp["cleanPodPolicy"] in ENUMS["cleanPodPolicy"], "spec.runPolicy.cleanPodPolicy must be None, Running or All")
    reps = spec.get("mpiReplicaSpecs")
    if not need(isinstance(reps, dict), "spec.mpiReplicaSpecs is required"):
        return out
    for role in reps:
        need(role in ("Launcher", "Worker"), f"spec.mpiReplicaSpecs.{role}: only Launcher and Worker")
    ok = True
    for role in ("Launcher", "Worker"):
        r = reps.get(role)
        where = f"spec.mpiReplicaSpecs.{role}"
        if not need(isinstance(r, dict), f"{where} is required"):
            ok = False
            continue
        for k in r:
            need(k in REPLICA_KEYS, f"{where}.{k} is not a ReplicaSpec field")
        n = r.get("replicas", 1)
        need(isinstance(n, int) and not isinstance(n, bool) and (n == 1 if role == "Launcher" else n >= 1),
             f"{where}.replicas must be {'1' if role == 'Launcher' else 'an integer >= 1'}")
        pod = ((r.get("template") or {}).get("spec")) or {}
        cs = pod.get("containers")
        if not need(isinstance(cs, list) and cs, f"{where}.template.spec.containers must be a non-empty list"):
            ok = False
            continue
        for i, c in enumerate(cs):
            need(isinstance(c, dict) and isinstance(c.get("name"), str) and isinstance(c.get("image"), str),
                 f"{where}.template.spec.containers[{i}] needs a name and an image")
        need(isinstance(pod.get("terminationGracePeriodSeconds"), int),
             f"{where}: set terminationGracePeriodSeconds above the checkpoint's save time (a preempted pod is "
             "killed that long after its SIGTERM)")
    if not ok:
        return out
    # ztrain's launcher
    argv = launcher_mpirun(job)
    if need(argv, "the launcher runs no mpirun command"):
        hf = argv[argv.index("--hostfile") + 1] if "--hostfile" in argv[:-1] else None
        need(hf == HOSTFILE, f"the launcher's mpirun must name the operator's hostfile (--hostfile {HOSTFILE}): "
             "Open MPI 5 ignores the OMPI_MCA_orte_default_hostfile the operator sets (mpi-operator #842) and "
             "would start every rank on the launcher")
        # the launcher is a host of the hostfile too with runLauncherAsWorker
        hosts = reps["Worker"].get("replicas", 1) + (1 if spec.get("runLauncherAsWorker") is True else 0)
        np_ = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a in ("-np", "-n", "--np")), None)
        need(np_ is not None and np_.isdigit() and int(np_) == hosts * slots,
             f"the launcher's -np {np_} must be the hostfile's hosts x slotsPerWorker = {hosts * slots}")
        need("ztrain" in " ".join(argv), "the launcher's mpirun does not run ztrain")
    for c in reps["Worker"]["template"]["spec"]["containers"]:
        gpus = ((c.get("resources") or {}).get("limits") or {}).get("nvidia.com/gpu")
        if gpus is not None:
            need(gpus == slots, f"worker container {c.get('name')}: nvidia.com/gpu {gpus} != slotsPerWorker {slots} "
                 "(one rank a GPU)")
    return out


def render(job, out_dir, namespace="default", hosts=None):
    """The hostfile and environment the operator gives the launcher; returns the mpirun argv."""
    name, spec = job["metadata"]["name"], job["spec"]
    workers, slots = spec["mpiReplicaSpecs"]["Worker"].get("replicas", 1), spec.get("slotsPerWorker", 1)
    # as the operator's controller writes them (pkg/controller/mpi_job_controller.go, v0.8): each
    # pod by its DNS name under the job's headless service, the launcher first when it is a worker
    pods = ([f"{name}-launcher"] if spec.get("runLauncherAsWorker") is True else []) + \
        [f"{name}-worker-{i}" for i in range(workers)]
    if hosts and len(hosts) != len(pods):
        raise SystemExit(f"--hosts: {len(hosts)} hosts for {len(pods)} hostfile entries")
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "hostfile"), "w") as f:
        for i, pod in enumerate(pods):
            f.write(f"{hosts[i] if hosts else f'{pod}.{name}.{namespace}.svc'} slots={slots}\n")
    env = {"OMPI_MCA_orte_keep_fqdn_hostnames": "true", "OMPI_MCA_orte_default_hostfile": HOSTFILE,
           "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10", "OMPI_MCA_orte_set_default_slots": str(slots),
           "K_MPI_JOB_ROLE": "launcher"}
    with open(os.path.join(out_dir, "env"), "w") as f:
        f.write("".join(f"{k}={v}\n" for k, v in env.items()))
    return launcher_mpirun(job), env


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check")
    c.add_argument("manifests", nargs="+")
    r = sub.add_parser("render")
    r.add_argument("manifest")
    r.add_argument("--out", required=True)
    r.add_argument("--namespace", default="default")
    r.add_argument("--hosts", default="")
    a = ap.parse_args()
    if a.cmd == "check":
        bad = 0
        for path in a.manifests:
            for p in problems(load(path)):
                print(f"{path}: {p}", file=sys.stderr)
                bad += 1
            if not bad:
                print(f"{path}: ok")
        return 2 if bad else 0
    job = load(a.manifest)
    found = problems(job)
    if found:
        for p in found:
            print(f"{a.manifest}: {p}", file=sys.stderr)
        return 2
    argv, env = render(job, a.out, a.namespace, [h for h in a.hosts.split(",") if h] or None)
    print(json.dumps({"mpirun": argv, "env": env, "hostfile": os.path.join(a.out, "hostfile")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
