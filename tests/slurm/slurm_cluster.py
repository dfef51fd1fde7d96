"""A real Slurm cluster on one machine: a controller and N compute nodes in network namespaces (Debian's Slurm 22.05).

    with SlurmCluster(2) as cluster:
        subprocess.run(cluster.client(["srun", "-N2", "hostname"]), env=cluster.env())
        job = cluster.sbatch(["--output", log, script])
        cluster.wait_for_state(job, "COMPLETED")

- The controller is the namespace PREFIX<pid>c with a bridge `br0` at 10.214.0.1/24; node i is PREFIX<pid>n<i>
  with `eth0` at 10.214.0.<i+2>/24, a veth into that bridge. Clients (srun, sbatch, scontrol, mpirun under salloc)
  run in the controller's namespace, as on a login node. The subnet is not tests/multihost's (10.213.0.0/24).
- slurmctld runs as `slurmctld -D -i` in the controller's namespace; each slurmd as
  `nsenter --net=/run/netns/NODE unshare --uts sh -c 'hostname NODE; exec slurmd -D -N NODE'`: under `ip netns exec`
  slurmd fails (`No filesystem mounted on /sys/fs/cgroup`, it remounts /sys), and a UTS namespace gives each node
  its own hostname, which Open MPI names its shared-memory segments by. One munged serves every daemon and client
  (its socket is a path: `AuthInfo=socket=...`).
- slurm.conf: process tracking by /proc (no cgroups), no task plugin, CPUs as the consumable resource, PMIx the
  default MPI, a spool folder and TmpFS per node (`%n`; without TmpFS pmix cannot make its app folder), nodes
  returned to service when they register, and state in a fresh temporary folder (recovered state of a killed run
  blocks nodes for minutes).
- Cleanup always (also when the body raises, and on SIGTERM): every daemon by its pid, then every process left in
  the namespaces, the namespaces, and the work folder. Every daemon (munged too) runs in a namespace and gets SIGKILL
  when this script dies (PR_SET_PDEATHSIG), even by SIGKILL; at start, namespaces and work folders of this prefix
  whose creating process is gone are removed.

Needs root, iproute2, util-linux and Debian's slurmctld, slurmd, slurm-client and munge; `skip_unless_possible()`
exits 77 (ctest's SKIP_RETURN_CODE) with the reason otherwise.
"""
import ctypes
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

PREFIX = "vpsl"
SUBNET = "10.214.0.0/24"
CONTROLLER_ADDRESS = "10.214.0.1"
SKIP = 77
PROGRAMS = ("slurmctld", "slurmd", "srun", "sbatch", "scontrol", "scancel", "sinfo", "munged", "mungekey", "ip",
            "nsenter", "unshare")


def node_address(node):
    return f"10.214.0.{node + 2}"


def sh(*command, check=True, timeout=30):
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: exit {result.returncode}: {result.stderr.strip()}")
    return result


def find(program):
    return shutil.which(program) or next((p for p in (f"/usr/sbin/{program}", f"/sbin/{program}")
                                          if os.access(p, os.X_OK)), None)


def skip_unless_possible():
    """Exits 77 with one line saying why when a Slurm cluster cannot be made here."""
    reason = None
    missing = [p for p in PROGRAMS if not find(p)]
    if os.geteuid() != 0:
        reason = "needs root (network namespaces, veth links, Slurm's daemons)"
    elif missing:
        reason = (f"needs {', '.join(missing)} (Debian: slurmctld slurmd slurm-client munge iproute2 util-linux; "
                  "scripts/setup.sh --tests installs them)")
    elif not find("mpirun"):
        reason = "needs Open MPI's mpirun"
    else:
        probe = f"{PREFIX}probe{os.getpid()}"
        made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
        if made.returncode != 0:
            reason = f"cannot make a network namespace: {made.stderr.strip()}"
        else:
            subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    if reason:
        print(f"SKIP: Slurm tests {reason}")
        sys.exit(SKIP)


def namespace_pids(namespace):
    result = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True)
    return [int(p) for p in result.stdout.split()] if result.returncode == 0 else []


def kill_pid(pid, sig=signal.SIGKILL):
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def delete_namespace(namespace):
    for _ in range(3):  # kill, then kill what was being started meanwhile
        pids = namespace_pids(namespace)
        if not pids:
            break
        for pid in pids:
            kill_pid(pid)
        time.sleep(0.2)
    subprocess.run(["ip", "netns", "del", namespace], capture_output=True)


def remove_stale_clusters():
    """Namespaces and work folders of this prefix whose creator (the pid in the name) is gone: left by a killed run
    (its daemons, munged included, ran in those namespaces and die with them)."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for line in listed.splitlines():
        name = line.split()[0] if line.split() else ""
        match = re.fullmatch(PREFIX + r"(\d+)(c|n\d+)", name)
        if match and not os.path.exists(f"/proc/{match.group(1)}"):
            delete_namespace(name)
    for folder in glob.glob(os.path.join(tempfile.gettempdir(), PREFIX + "*_*")):
        match = re.fullmatch(PREFIX + r"(\d+)_.*", os.path.basename(folder))
        if match and not os.path.exists(f"/proc/{match.group(1)}"):
            shutil.rmtree(folder, ignore_errors=True)


PR_SET_PDEATHSIG = 1


def die_with_parent():
    """In a daemon's child before exec: SIGKILL when this script dies, even by SIGKILL (ctest's timeout); it lasts
    through the exec chain (ip netns exec, nsenter, unshare, sh -c exec)."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


SLURM_CONF = """# A test cluster (tests/slurm/slurm_cluster.py): every path under this run's work folder.
ClusterName=vpsl
SlurmctldHost={controller}({controller_address})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket}
StateSaveLocation={work}/state
SlurmdSpoolDir={work}/spool/%n
TmpFS={work}/tmp/%n
SlurmctldPidFile={work}/slurmctld.pid
SlurmdPidFile={work}/slurmd-%n.pid
SlurmctldLogFile={work}/slurmctld.log
SlurmdLogFile={work}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=pmix
SchedulerType=sched/builtin
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SlurmctldTimeout=30
SlurmdTimeout=300
MessageTimeout=60
InactiveLimit=0
KillWait={kill_wait}
MinJobAge=600
{nodes}
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


class SlurmCluster:
    def __init__(self, nodes=2, cpus_per_node=2, kill_wait=60, start_within=120):
        assert 1 <= nodes <= 8
        self.count = nodes
        self.cpus = cpus_per_node
        self.kill_wait = kill_wait
        self.start_within = start_within
        self.tag = f"{PREFIX}{os.getpid()}"
        self.controller = f"{self.tag}c"
        self.nodes = [f"{self.tag}n{i}" for i in range(nodes)]
        self.work = None
        self.daemons = {}  # name -> Popen
        self.munged_pid = None
        self._old_sigterm = None

    def node_name(self, i):
        return self.nodes[i]  # the namespace, the Slurm node name and its hostname are one name

    # --- life cycle ---------------------------------------------------------------------------------------------
    def __enter__(self):
        remove_stale_clusters()
        # ctest's timeout sends SIGTERM: clean up on the way out as on any failure.
        self._old_sigterm = signal.signal(signal.SIGTERM, lambda *_: sys.exit("SIGTERM: cleaning up the cluster"))
        try:
            self._make_network()
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, exc_type, exc, traceback):
        if exc_type is not None and self.work:
            print("the cluster's logs, ends:" + self.logs_tail(2000))  # what Slurm said, for the failure
        self.close()
        return False

    def _make_network(self):
        self.work = tempfile.mkdtemp(prefix=f"{self.tag}_")
        os.chmod(self.work, 0o755)  # munged refuses a key or socket folder others may write into
        for namespace in [self.controller] + self.nodes:
            sh("ip", "netns", "add", namespace)
            sh("ip", "-n", namespace, "link", "set", "lo", "up")
        sh("ip", "-n", self.controller, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", self.controller, "addr", "add", CONTROLLER_ADDRESS + "/24", "dev", "br0")
        sh("ip", "-n", self.controller, "link", "set", "br0", "up")
        for i, namespace in enumerate(self.nodes):
            port = f"port{i}"
            sh("ip", "link", "add", "eth0", "netns", namespace, "type", "veth", "peer", "name", port, "netns",
               self.controller)
            sh("ip", "-n", self.controller, "link", "set", port, "master", "br0")
            sh("ip", "-n", self.controller, "link", "set", port, "up")
            sh("ip", "-n", namespace, "addr", "add", node_address(i) + "/24", "dev", "eth0")
            sh("ip", "-n", namespace, "link", "set", "eth0", "up")

    def _start(self):
        w = self.work
        for folder in ["state", "munge", "spool", "tmp"] + [f"spool/{n}" for n in self.nodes] + \
                [f"tmp/{n}" for n in self.nodes]:
            os.makedirs(os.path.join(w, folder), exist_ok=True)
        os.chmod(os.path.join(w, "munge"), 0o700)
        self.munge_socket = os.path.join(w, "munge", "munge.socket")
        key = os.path.join(w, "munge", "munge.key")
        sh(find("mungekey"), "--create", f"--keyfile={key}")
        # munged in the controller's namespace too (its socket is a path every namespace sees), so that removing
        # a killed run's namespaces ends it.
        munged = subprocess.Popen(["ip", "netns", "exec", self.controller, find("munged"), "--foreground", "--force",
                                   f"--socket={self.munge_socket}",
                                   f"--key-file={key}", f"--pid-file={w}/munge/munged.pid",
                                   f"--log-file={w}/munge/munged.log", f"--seed-file={w}/munge/munged.seed"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=die_with_parent)
        self.daemons["munged"] = munged
        self._wait(lambda: os.path.exists(self.munge_socket), "munged's socket", munged)
        nodes = "\n".join(f"NodeName={n} NodeAddr={node_address(i)} NodeHostname={n} CPUs={self.cpus} State=UNKNOWN"
                          for i, n in enumerate(self.nodes))
        self.conf = os.path.join(w, "slurm.conf")
        with open(self.conf, "w") as f:
            f.write(SLURM_CONF.format(controller=self.controller, controller_address=CONTROLLER_ADDRESS,
                                      munge_socket=self.munge_socket, work=w, kill_wait=self.kill_wait, nodes=nodes))
        log = open(os.path.join(w, "daemons.out"), "a")
        self.daemons["slurmctld"] = subprocess.Popen(
            ["ip", "netns", "exec", self.controller, "unshare", "--uts", "sh", "-c",
             'hostname "$0" && exec "$@"', self.controller, find("slurmctld"), "-D", "-i", "-f", self.conf],
            stdout=log, stderr=log, env=self.env(), preexec_fn=die_with_parent)
        for n in self.nodes:
            self.daemons[n] = subprocess.Popen(
                ["nsenter", f"--net=/run/netns/{n}", "unshare", "--uts", "sh", "-c",
                 'hostname "$0" && exec "$@"', n, find("slurmd"), "-D", "-N", n, "-f", self.conf],
                stdout=log, stderr=log, env=self.env(), preexec_fn=die_with_parent)
        self._wait(self._nodes_idle, "every node idle (sinfo)", None)

    def _wait(self, ready, what, process):
        deadline = time.monotonic() + self.start_within
        while time.monotonic() < deadline:
            if ready():
                return
            for name, daemon in self.daemons.items():
                if daemon.poll() is not None:
                    raise RuntimeError(f"{name} exited {daemon.returncode} while waiting for {what}: "
                                       f"{self.logs_tail()}")
            time.sleep(0.1)
        raise RuntimeError(f"no {what} within {self.start_within} s: {self.logs_tail()}")

    def _nodes_idle(self):
        try:
            result = subprocess.run(self.client(["sinfo", "-h", "-N", "-o", "%N %t"]), capture_output=True,
                                    text=True, env=self.env(), timeout=30)
        except subprocess.TimeoutExpired:
            return False  # a controller slow to answer under load is not yet ready: ask again until the deadline
        states = dict(line.split() for line in result.stdout.splitlines() if len(line.split()) == 2)
        return result.returncode == 0 and all(states.get(n) == "idle" for n in self.nodes)

    def logs_tail(self, chars=3000):
        text = ""
        for name in ["daemons.out", "munge/munged.log", "slurmctld.log"] + [f"slurmd-{n}.log" for n in self.nodes]:
            path = os.path.join(self.work or "", name)
            if os.path.exists(path):
                text += f"\n--- {name}\n" + open(path, errors="replace").read()[-chars:]
        return text

    def close(self):
        # The daemons by their pids (SIGTERM, then SIGKILL), then whatever is left in the namespaces (job steps,
        # slurmstepd), then the namespaces and the state.
        for daemon in self.daemons.values():
            if daemon.poll() is None:
                daemon.terminate()
        deadline = time.monotonic() + 5
        for daemon in self.daemons.values():
            try:
                daemon.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()
        self.daemons = {}
        for namespace in self.nodes + [self.controller]:
            delete_namespace(namespace)
        if self.work:
            if os.environ.get("VITPIPE_KEEP_TEMP"):
                print(f"kept the cluster's folder {self.work}")
            else:
                shutil.rmtree(self.work, ignore_errors=True)
            self.work = None
        if self._old_sigterm is not None:
            signal.signal(signal.SIGTERM, self._old_sigterm)
            self._old_sigterm = None

    # --- using it -----------------------------------------------------------------------------------------------
    def env(self, **extra):
        """The environment of clients and jobs: this cluster's slurm.conf, Open MPI allowed as root, MPI's TCP on the
        cluster's subnet (the nodes share no memory)."""
        return dict(os.environ, SLURM_CONF=os.path.join(self.work, "slurm.conf"), OMPI_ALLOW_RUN_AS_ROOT="1",
                    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_btl="self,vader,tcp",
                    OMPI_MCA_btl_tcp_if_include=SUBNET, OMPI_MCA_oob_tcp_if_include=SUBNET, **extra)

    def client(self, command):
        """A client command line run in the controller's namespace (the login node)."""
        return ["ip", "netns", "exec", self.controller, *command]

    def run(self, command, timeout=60, check=True, **extra_env):
        result = subprocess.run(self.client(command), capture_output=True, text=True, timeout=timeout,
                                env=self.env(**extra_env))
        if check and result.returncode != 0:
            raise RuntimeError(f"{' '.join(command)}: exit {result.returncode}: {result.stdout[-2000:]}"
                               f"{result.stderr[-3000:]}{self.logs_tail(1500)}")
        return result

    def sbatch(self, arguments, **extra_env):
        """Submits a batch job; returns its id."""
        out = self.run(["sbatch", "--parsable", *arguments], **extra_env).stdout.strip()
        return int(out.split(";")[0])

    def job(self, job_id):
        """`scontrol show job` as a dict (JobState, Restarts, ExitCode, ...); {} when the controller did not answer
        in time (under load an RPC can time out: the callers poll again)."""
        try:
            result = self.run(["scontrol", "show", "job", "-o", str(job_id)], check=False)
        except subprocess.TimeoutExpired:
            return {}
        fields = {}
        for word in result.stdout.split():
            if "=" in word:
                key, value = word.split("=", 1)
                fields.setdefault(key, value)
        return fields

    def wait_for_state(self, job_id, states, timeout):
        states = (states,) if isinstance(states, str) else tuple(states)
        deadline = time.monotonic() + timeout
        fields = {}
        while time.monotonic() < deadline:
            fields = self.job(job_id)
            if fields.get("JobState") in states:
                return fields
            time.sleep(0.2)
        raise RuntimeError(f"job {job_id} not {'/'.join(states)} within {timeout} s: {fields}{self.logs_tail(1500)}")

    def start_requeued_now(self, job_id):
        """`scontrol update JobId=N StartTime=now` for a requeued (pending) job, instead of its wait of about 2
        minutes (the credential's lifetime, AuthInfo cred_expire). Not in the second of the kill: slurmd refuses a
        launch whose credential is not newer, in whole seconds, than the revocation of the job's previous run
        ("Job credential revoked"; the job then fails or is held)."""
        time.sleep(2)
        self.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"])
