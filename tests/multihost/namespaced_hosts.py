"""N "hosts" on one machine for multi-host runs of vitpipe: network namespaces joined by veth links shaped with tc.

    with NamespacedHosts(2, rate="1gbit") as hosts:
        subprocess.run(hosts.mpirun(4, [vitpipe, "train", ...]))
        hosts.cut(1)         # host 1's link down: silence, as a pulled cable or a dead switch port
        hosts.restore(1)

- Host i is the namespace PREFIX<pid>h<i> with the address 10.213.0.<i+1>/24 on its interface `eth0`; 2 hosts
  share one veth pair, more hosts each have a veth to a bridge in a 'switch' namespace PREFIX<pid>sw.
- Each host's egress is shaped with `tc qdisc ... tbf` (this kernel has no netem: rates, no added delay), and its
  namespaced sysctl net.ipv4.tcp_retries2 is 5 (default 15, about 15 minutes of retransmissions before a socket to a
  vanished peer gives up; mpirun's abort path waits them out).
- mpirun runs in host 0's namespace and starts its daemon on each other host through an rsh agent (written into a
  temporary directory) that runs the daemon's command under `ip netns exec` there. Both run under `unshare --uts`
  with the host's own hostname: namespaces share the hostname, and Open MPI names its shared-memory (vader)
  segments by it (two namespaced hosts with 2 ranks each crashed in vader without distinct names).
- Cleanup always: every process left in the namespaces is killed and the namespaces deleted (also when the body
  raises); at start, namespaces of this prefix whose creating process is gone are removed.

Needs root and iproute2; `skip_unless_possible()` exits 77 (ctest's SKIP_RETURN_CODE) with the reason otherwise.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

PREFIX = "vpmh"
SUBNET = "10.213.0.0/24"
DEVICE = "eth0"
NOWHERE_MAC = "02:00:00:00:00:01"  # locally administered, on no interface: frames sent to it are dropped
SKIP = 77


def address(host):
    return f"10.213.0.{host + 1}"


# The launch recipe of the README: TCP only between hosts (shared memory within one), the subnet named for both
# MPI's messages and its daemons' control channel, and keepalives so that a daemon behind a cut link is noticed.
def mpirun_mca():
    return ["--mca", "btl", "self,vader,tcp", "--mca", "btl_tcp_if_include", SUBNET,
            "--mca", "oob_tcp_if_include", SUBNET,
            "--mca", "oob_tcp_keepalive_time", "10", "--mca", "oob_tcp_keepalive_intvl", "5",
            "--mca", "oob_tcp_keepalive_probes", "3"]


# The rsh agent. Like ssh, whose news of the remote command's end travels over the same link, it holds (bounded)
# while the host's link is down: mpirun must notice a lost daemon by itself, as it must with real hosts.
AGENT_HOLD_SECONDS = 600
AGENT_TEMPLATE = """#!/bin/sh
# rsh agent for Open MPI (--mca plm_rsh_agent): runs the daemon's command "on" a namespaced host.
while [ $# -gt 0 ]; do case "$1" in -*) shift ;; *) break ;; esac; done
host="$1"; shift
case "$host" in
@CASES@
  *) echo "rsh agent: unknown host $host" >&2; exit 255 ;;
esac
exec 3<&0  # a background command's stdin would be /dev/null
ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec sh -c "$1"' "$name" "$*" <&3 &
daemon=$!
trap 'kill -TERM $daemon 2>/dev/null; exit 143' TERM INT
wait $daemon
status=$?
held=0
while [ $held -lt @HOLD@ ] && ! ip -n "$ns" link show @DEVICE@ | grep -q 'state UP'; do
  sleep 1; held=$((held + 1))
done
exit $status
"""

MPIRUN_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
              "OMPI_MCA_rmaps_base_oversubscribe": "1", "OMP_NUM_THREADS": "1", "OMPI_MCA_mpi_yield_when_idle": "1"}


def sh(*command, check=True):
    result = subprocess.run(command, capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: exit {result.returncode}: {result.stderr.strip()}")
    return result


def skip_unless_possible():
    """Exits 77 with one line saying why when namespaced hosts cannot be made here."""
    reason = None
    if os.geteuid() != 0:
        reason = "needs root (network namespaces, veth links, tc)"
    elif not (shutil.which("ip") and shutil.which("tc") and shutil.which("unshare")):
        reason = "needs iproute2 (ip, tc) and util-linux (unshare)"
    elif not shutil.which("mpirun"):
        reason = "needs Open MPI's mpirun"
    else:
        probe = f"{PREFIX}probe{os.getpid()}"
        made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
        if made.returncode != 0:
            reason = f"cannot make a network namespace: {made.stderr.strip()}"
        else:
            subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    if reason:
        print(f"SKIP: multi-host tests {reason}")
        sys.exit(SKIP)


def namespace_pids(namespace):
    result = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True)
    return [int(p) for p in result.stdout.split()] if result.returncode == 0 else []


def delete_namespace(namespace):
    for _ in range(3):  # kill, then kill what was being started meanwhile
        pids = namespace_pids(namespace)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.2)
    subprocess.run(["ip", "netns", "del", namespace], capture_output=True)


def remove_stale_namespaces():
    """Namespaces of this prefix whose creator (the pid in the name) is gone: left by a killed run."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for line in listed.splitlines():
        name = line.split()[0] if line.split() else ""
        match = re.fullmatch(PREFIX + r"(\d+)(h\d+|sw)", name)
        if match and not os.path.exists(f"/proc/{match.group(1)}"):
            delete_namespace(name)


class NamespacedHosts:
    def __init__(self, count, rate="1gbit", tcp_retries2=5):
        assert 2 <= count <= 8, "2 to 8 hosts"
        self.count = count
        self.rate = rate
        self.tcp_retries2 = tcp_retries2
        self.tag = f"{PREFIX}{os.getpid()}"
        self.namespaces = [f"{self.tag}h{i}" for i in range(count)]
        self.switch = f"{self.tag}sw" if count > 2 else None
        self.work = None

    def hostname(self, host):
        return f"{self.tag}-host{host}"

    def __enter__(self):
        remove_stale_namespaces()
        try:
            self._make()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _make(self):
        self.work = tempfile.mkdtemp(prefix=f"{self.tag}_")
        for namespace in self.namespaces + ([self.switch] if self.switch else []):
            sh("ip", "netns", "add", namespace)
            sh("ip", "-n", namespace, "link", "set", "lo", "up")
        if self.switch is None:
            a, b = self.namespaces
            sh("ip", "link", "add", DEVICE, "netns", a, "type", "veth", "peer", "name", DEVICE, "netns", b)
        else:
            sh("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
            sh("ip", "-n", self.switch, "link", "set", "br0", "up")
            for i, namespace in enumerate(self.namespaces):
                port = f"port{i}"
                sh("ip", "link", "add", DEVICE, "netns", namespace, "type", "veth", "peer", "name", port, "netns",
                   self.switch)
                sh("ip", "-n", self.switch, "link", "set", port, "master", "br0")
                sh("ip", "-n", self.switch, "link", "set", port, "up")
        for i, namespace in enumerate(self.namespaces):
            sh("ip", "-n", namespace, "addr", "add", address(i) + "/24", "dev", DEVICE)
            sh("ip", "-n", namespace, "link", "set", DEVICE, "up")
            if self.rate:
                # burst: at least rate/HZ for tbf to reach its rate; latency bounds the queue.
                sh("ip", "netns", "exec", namespace, "tc", "qdisc", "add", "dev", DEVICE, "root", "tbf", "rate",
                   self.rate, "burst", "256kb", "latency", "100ms")
            if self.tcp_retries2 is not None:
                sh("ip", "netns", "exec", namespace, "sysctl", "-q", f"net.ipv4.tcp_retries2={self.tcp_retries2}")
        self.agent = os.path.join(self.work, "rsh_agent.sh")
        with open(self.agent, "w") as f:
            f.write(self._agent_script())
        os.chmod(self.agent, 0o755)

    def _agent_script(self):
        cases = "\n".join(f"  {address(i)}) ns={self.namespaces[i]}; name={self.hostname(i)} ;;"
                          for i in range(self.count))
        # Open MPI calls it as it would call ssh: [options] HOST COMMAND...; the command is a shell line.
        return AGENT_TEMPLATE.replace("@CASES@", cases).replace("@DEVICE@", DEVICE).replace(
            "@HOLD@", str(AGENT_HOLD_SECONDS))

    def hostfile(self, slots):
        """A hostfile with `slots` ranks on each host, by address (mpirun runs on host 0 and knows it as local)."""
        path = os.path.join(self.work, f"hostfile-{slots}")
        with open(path, "w") as f:
            for i in range(self.count):
                f.write(f"{address(i)} slots={slots}\n")
        return path

    def mpirun(self, ranks_per_host, program, extra_mca=()):
        """The command line: mpirun in host 0's namespace with its own hostname, ranks_per_host on each host."""
        mpirun = ["mpirun", "--hostfile", self.hostfile(ranks_per_host), "-np", str(ranks_per_host * self.count),
                  "--map-by", "slot", "--mca", "plm_rsh_agent", self.agent, *mpirun_mca(), *extra_mca, *program]
        return self.in_host(0, mpirun)

    def in_host(self, host, command):
        return ["ip", "netns", "exec", self.namespaces[host], "unshare", "--uts", "sh", "-c",
                'hostname "$0" && exec "$@"', self.hostname(host), *command]

    def env(self, **extra):
        return dict(os.environ, **MPIRUN_ENV, **extra)

    def cut(self, host, silent=False):
        """Host's link down (its end loses carrier, its peer sees silence), or with `silent` every link stays up
        and frames between host and the others go to a MAC no one has: silence both ways, a switch that drops
        everything (this kernel has no tc drop action)."""
        if not silent:
            sh("ip", "-n", self.namespaces[host], "link", "set", DEVICE, "down")
            return
        for other in range(self.count):
            if other != host:
                for a, b in ((host, other), (other, host)):
                    sh("ip", "-n", self.namespaces[a], "neigh", "replace", address(b), "lladdr", NOWHERE_MAC, "dev",
                       DEVICE, "nud", "permanent")

    def restore(self, host):
        sh("ip", "-n", self.namespaces[host], "link", "set", DEVICE, "up")
        for other in range(self.count):
            if other != host:
                for a, b in ((host, other), (other, host)):
                    sh("ip", "-n", self.namespaces[a], "neigh", "del", address(b), "dev", DEVICE, check=False)

    def interface_bytes(self, host):
        """(tx, rx) bytes of host's interface as the kernel counts them (headers, ACKs and daemon traffic included)."""
        read = sh("ip", "netns", "exec", self.namespaces[host], "cat", f"/sys/class/net/{DEVICE}/statistics/tx_bytes",
                  f"/sys/class/net/{DEVICE}/statistics/rx_bytes").stdout.split()
        return int(read[0]), int(read[1])

    def processes(self):
        """pid -> command line of every process left in the hosts' namespaces."""
        found = {}
        for namespace in self.namespaces:
            for pid in namespace_pids(namespace):
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        found[pid] = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
                except OSError:
                    pass
        return found

    def close(self):
        for namespace in self.namespaces + ([self.switch] if self.switch else []):
            delete_namespace(namespace)
        if self.work:
            shutil.rmtree(self.work, ignore_errors=True)
            self.work = None
