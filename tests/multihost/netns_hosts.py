"""Several machines on this one, for the multi-host tests: each "host" is a network namespace with
its own address on a bridge, its own host name (a UTS namespace) and its own local directories
(a mount namespace: work/<host>/local bind-mounted on work/local, so the same path names a
different directory on each host, as a local SSD would). mpirun, in the root namespace, starts
its daemons on them over TCP through an rsh agent (work/nsrsh) that runs a command inside the
host's namespaces, so the ranks of one host share memory and talk to the other hosts over their
veth links, which a test can cut (ip link set down). mpirun itself runs in a mount namespace of
its own whose /etc/hosts names the hosts, so that the launcher's own messages name them too.

Needs root with CAP_NET_ADMIN and CAP_SYS_ADMIN; `Hosts.unavailable()` says why not, for a skip.
"""
import os
import shutil
import subprocess
import uuid


def _sh(*cmd, check=True):
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


class Hosts:
    SUBNET = "10.77.{k}."  # k: this harness's instance (several tests may run at once)

    @staticmethod
    def unavailable():
        """Why namespaces cannot be made here ("" when they can)."""
        if os.geteuid() != 0:
            return "not root: network namespaces need CAP_NET_ADMIN"
        for tool in ("ip", "unshare", "mpirun"):
            if not shutil.which(tool):
                return f"{tool} not found"
        name = "ztprobe" + uuid.uuid4().hex[:6]
        p = _sh("ip", "netns", "add", name, check=False)
        if p.returncode != 0:
            return f"ip netns add failed: {p.stderr.strip()}"
        _sh("ip", "netns", "del", name, check=False)
        return ""

    def __init__(self, work, n):
        self.work, self.tag = work, uuid.uuid4().hex[:5]
        k = 100 + int(self.tag, 16) % 150
        self.prefix = self.SUBNET.format(k=k)
        self.bridge = f"ztb{self.tag}"
        self.names = [f"h{i + 1}" for i in range(n)]  # host names, as gethostname() gives them
        self.addr = {h: f"{self.prefix}{11 + i}" for i, h in enumerate(self.names)}
        self.gateway = f"{self.prefix}1"  # the root namespace, where servers listen
        self.netns = {h: f"zt{self.tag}{h}" for h in self.names}
        self.veth = {h: f"ztv{self.tag}{h}" for h in self.names}  # root side; the host side is eth0
        os.makedirs(os.path.join(work, "local"), exist_ok=True)
        _sh("ip", "link", "add", self.bridge, "type", "bridge")
        _sh("ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        _sh("ip", "link", "set", self.bridge, "up")
        for h in self.names:
            ns, v = self.netns[h], self.veth[h]
            _sh("ip", "netns", "add", ns)
            _sh("ip", "link", "add", v, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _sh("ip", "link", "set", v, "master", self.bridge)
            _sh("ip", "link", "set", v, "up")
            _sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{self.addr[h]}/24", "dev", "eth0")
            _sh("ip", "netns", "exec", ns, "ip", "link", "set", "eth0", "up")
            _sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
            os.makedirs(os.path.join(work, h, "local"), exist_ok=True)
        self.etc_hosts = os.path.join(work, "etc_hosts")
        with open("/etc/hosts") as f, open(self.etc_hosts, "w") as out:
            out.write(f.read() + "".join(f"{self.addr[h]} {h}\n" for h in self.names))
        self.agent = os.path.join(work, "nsrsh")
        cases = "\n".join(f'  {self.addr[h]}|{h}) ns={self.netns[h]}; h={h} ;;' for h in self.names)
        local = os.path.join(work, "local")
        with open(self.agent, "w") as f:  # rsh agent: nsrsh HOST COMMAND... (COMMAND is for a shell)
            f.write(f"""#!/bin/sh
target=$1; shift
case "$target" in
{cases}
  *) echo "nsrsh: unknown host $target" >&2; exit 255 ;;
esac
exec ip netns exec "$ns" unshare --uts --mount --propagation private sh -c \\
  'hostname "$0"; mount --bind "{work}/$0/local" "{local}" || exit 255; eval "$1"' "$h" "$*"
""")
        os.chmod(self.agent, 0o755)

    def hostfile(self, slots, hosts=None):
        """A hostfile with `slots` ranks on each of `hosts` (default: all), by name."""
        path = os.path.join(self.work, f"hostfile.{'-'.join(hosts or self.names)}")
        with open(path, "w") as f:
            for h in hosts or self.names:
                f.write(f"{h} slots={slots}\n")
        return path

    def launcher(self):
        """The prefix that runs mpirun where the host names resolve: a mount namespace of its own
        whose /etc/hosts (bind-mounted) names the hosts' addresses; the network is the root's."""
        return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                f'mount --bind "{self.etc_hosts}" /etc/hosts && exec "$@"', "sh"]

    def mpirun(self, np_, slots, hosts=None):
        """mpirun over the hosts: np_ ranks, `slots` per host, TCP on the bridge's subnet only."""
        net = f"{self.prefix}0/24"
        return [*self.launcher(), "mpirun", "-np", str(np_), "--hostfile", self.hostfile(slots, hosts),
                "--bind-to", "none",
                "--mca", "plm_rsh_agent", self.agent, "--mca", "plm_rsh_no_tree_spawn", "1",
                "--mca", "oob_tcp_if_include", net, "--mca", "btl_tcp_if_include", net,
                "--mca", "btl", "self,vader,tcp",
                # a host whose link is gone is noticed by the launcher's keepalives within ~6 s
                # (the default, 300 s + 9 x 20 s, would hold mpirun long after the ranks ended)
                "--mca", "oob_tcp_keepalive_time", "3", "--mca", "oob_tcp_keepalive_intvl", "1",
                "--mca", "oob_tcp_keepalive_probes", "3"]

    def launch_script(self, path, slots, probe_port, forward=()):
        """A launch script for `ztrain supervise -- SCRIPT train SPEC ...`: it keeps the hosts that
        reach the root namespace's probe_port within 3 s (each tries from inside), writes their
        hostfile and runs mpirun over them with `slots` ranks each, then `ztrain` with the script's
        arguments ($ZTRAIN). `forward`: environment variables for the ranks."""
        base = self.mpirun(1, slots)
        mpirun_at = base.index("mpirun")
        opts = base[mpirun_at + 5:]  # after: mpirun -np N --hostfile FILE
        quote = lambda a: "'" + a.replace("'", "'\\''") + "'"  # noqa: E731
        with open(path, "w") as f:
            f.write(f"""#!/bin/bash
live=()
for h in {' '.join(self.names)}; do
  if timeout -k 1 3 {self.agent} "$h" "bash -c 'exec 3<>/dev/tcp/{self.gateway}/{probe_port}'" 2>/dev/null; then
    live+=("$h")
  fi
done
hostfile={self.work}/hostfile.live
: > "$hostfile"
for h in "${{live[@]}}"; do echo "$h slots={slots}" >> "$hostfile"; done
echo "launch: hosts that answer: ${{live[*]:-none}}" >&2
[ ${{#live[@]}} -gt 0 ] || exit 1
exec {' '.join(quote(a) for a in base[:mpirun_at])} mpirun -np $(({slots} * ${{#live[@]}})) --hostfile "$hostfile" \
  {' '.join(quote(a) for a in opts)} {' '.join(f'-x {v}' for v in forward)} "$ZTRAIN" "$@"
""")
        os.chmod(path, 0o755)
        return path

    def link(self, host, up):
        """Cuts (or restores) a host's link: its veth in the root namespace goes down."""
        _sh("ip", "link", "set", self.veth[host], "up" if up else "down")

    def close(self):
        for h in self.names:  # whatever still runs there (a cut-off host's ranks) goes with it
            pids = _sh("ip", "netns", "pids", self.netns[h], check=False).stdout.split()
            if pids:
                _sh("kill", "-9", *pids, check=False)
        for h in self.names:
            _sh("ip", "netns", "del", self.netns[h], check=False)
            _sh("ip", "link", "del", self.veth[h], check=False)
        _sh("ip", "link", "del", self.bridge, check=False)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
