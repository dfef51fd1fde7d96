#!/usr/bin/python3
"""`vitpipe train` across namespaced hosts (namespaced_hosts.py: veth links shaped by tc, mpirun's daemons started
in each namespace through an rsh agent, the README's launch recipe).

    check_multihost.py CASE

  equal.replicas1x2   2 hosts x 1 rank: 2 data-parallel replicas over the link == one process (within 1e-4)
  equal.stages2x2     2 hosts x 2 ranks: 2 stages x 2 replicas == one process; the hosts as MPI's shared-memory
                      split finds them in the run's metrics and in `vitpipe plan`, and the ranks placed so that a
                      stage's replicas share a host (the activations cross the link, not the gradients); the plan
                      measures the reduction inside each host and, given --link, across the link
  lost-link           2 hosts x 1 rank, 2 stages, --comm-timeout 30: host 1's link goes down after the first
                      checkpoint; every process (mpirun, the daemons, the ranks) ends non-zero within 120 s, each rank's
                      line is in <output-dir>/failures.log, and once the link is back `--resume` across the hosts ends
                      at exactly the weights of an uninterrupted run
  silent-link         the same with every link up and host 1's frames going nowhere (a switch dropping them) and
                      --comm-timeout 8, below the keepalives' 25 s: each rank's own deadline ends it, with its line
  killed-rank         the same with the rank on host 1 killed by SIGKILL instead (mpirun names it; rank 0's line)

Exits 77 (skipped) without root or iproute2. Every case is bounded in time and removes its namespaces.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "distributed"))
sys.path.insert(0, os.path.join(HERE, "..", "train_e2e"))
import namespaced_hosts  # noqa: E402
from namespaced_hosts import NamespacedHosts  # noqa: E402

VITPIPE = os.environ["VITPIPE"]
COMM_TIMEOUT = 30
END_WITHIN = 120  # seconds from the cut to the last process gone


def run(command, env=None, timeout=150, expect_ok=True):
    print("$", " ".join(command), flush=True)
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    if expect_ok and result.returncode != 0:
        print(result.stdout[-3000:] + result.stderr[-6000:])
        sys.exit(f"FAIL: exit status {result.returncode}")
    return result


def case_equal(work, ranks_per_host, flags, what):
    from check_distributed import BATCH, COMMON, SGD, STEPS, THREADS, compare, data_flag
    mini = os.path.join(work, "mini")
    run([VITPIPE, "init", "--preset", "vit-mini", "--image-size", "32", "--seed", "2", "--out", mini])
    common = ["--model", mini] + data_flag() + COMMON + THREADS + BATCH + SGD + STEPS
    reference = os.path.join(work, "reference")
    run([VITPIPE, "train", *common, "--output-dir", reference])
    out = os.path.join(work, "across-hosts")
    with NamespacedHosts(2, rate="1gbit") as hosts:
        before = hosts.interface_bytes(0)
        log = run(hosts.mpirun(ranks_per_host, [VITPIPE, "train", *common, *flags, "--output-dir", out]),
                  env=hosts.env()).stderr
        after = hosts.interface_bytes(0)
        if ranks_per_host > 1:
            plan = run(hosts.mpirun(ranks_per_host, [VITPIPE, "plan", "--model", mini, *COMMON, *THREADS, *BATCH,
                                                     "--link", "1Gbit", "--profile-cache", os.path.join(work, "cache"),
                                                     "--json"]),
                       env=hosts.env()).stdout
    ranks = 2 * ranks_per_host
    expected_hosts = [h for h in range(2) for _ in range(ranks_per_host)]
    if ranks_per_host > 1:
        check_topology(out, plan, expected_hosts)
    assert f"{ranks} MPI ranks" in log, "the job did not run as MPI ranks:\n" + log
    sent = after[0] - before[0]
    print(f"host 0's interface sent {sent} bytes, received {after[1] - before[1]}")
    assert sent > 100_000, f"only {sent} bytes crossed the link: the ranks did not talk over it"
    compare(os.path.join(mini, "model.safetensors"), os.path.join(reference, "model", "model.safetensors"),
            os.path.join(out, "model", "model.safetensors"), f"2 hosts x {ranks_per_host} rank(s), {what}")


def check_topology(out, plan_output, expected_hosts):
    """Which ranks share a host, as MPI's shared-memory split says (the namespaced hosts share one hostname's
    machine but not memory segments): in the run's metrics, with the rank order that keeps the smaller traffic
    between hosts (2 stages x 2 replicas: a stage's replicas share a host, the activations cross), and in the plan,
    whose reduction inside a host was measured by each host's ranks."""
    records = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    topology = next((r for r in records if r.get("type") == "topology"), None)
    assert topology, "no topology record in metrics.jsonl"
    print("topology record:", topology)
    assert topology["host_of_rank"] == expected_hosts, f"hosts {topology['host_of_rank']}, expected {expected_hosts}"
    assert topology["rank_order"] == "stage-major", "the gradients cross the link: " + str(topology)
    assert topology["cross_host_bytes_per_step"] < topology["other_order_cross_host_bytes_per_step"], topology
    plan = json.loads(plan_output[plan_output.index("{"):])
    planned = plan["hosts"]
    print("plan's hosts:", planned)
    assert planned["count"] == 2 and planned["host_of_rank"] == expected_hosts, planned
    # The reduction inside a host as the trainer runs it, measured by each host's ranks at once.
    local = plan.get("local_link", {})
    print("plan's local link:", local)
    assert local.get("collective_bandwidth_bytes_per_s", 0) > 0, "no reduction measured inside the hosts: " + str(local)
    # With --link, the reduction's rate across the link: one rank of each host in a ring, over the 1 Gbit/s link
    # (a pairing inside one host would reach the line rate and be capped at it, 125 MB/s; MPI's TCP gets less).
    link = plan.get("link", {})
    print("plan's link:", link)
    assert link.get("bandwidth_bytes_per_s") == 125e6, link
    assert 0.3 * 125e6 < link.get("collective_bandwidth_bytes_per_s", 0) < 125e6, \
        "the reduction across the 1 Gbit/s link was not measured over it: " + str(link)


def rank_processes(hosts):
    return {pid: line for pid, line in hosts.processes().items()
            if "vitpipe" in line.split(" ")[0] or "orted" in line or line.startswith("mpirun")}


def rank_pid_on(hosts, host):
    for pid, line in hosts.processes().items():
        if pid in namespaced_hosts.namespace_pids(hosts.namespaces[host]) and line.startswith(VITPIPE + " train"):
            return pid
    return None


def case_lost_peer(work, fault, comm_timeout=COMM_TIMEOUT):
    """fault "cut": host 1's link goes down; "silent": its frames go nowhere, every link up; "kill": the rank on
    host 1 gets SIGKILL."""
    import e2e_common as e2e
    csv = e2e.make_blob_dataset(os.path.join(work, "data"), {"train": 64, "val": 8}, seed=5)
    init = os.path.join(work, "init")
    e2e.run("init", "--preset", "vit-micro", "--labels", ",".join(e2e.BLOB_LABELS), "--seed", "2", "--out", init)
    flags = ["--epochs", "12", "--batch-size", "8", "--micro-batch-size", "4", "--pipeline-stages", "2",
             "--checkpoint-every", "2", "--threads", "1", "--seed", "3"]
    reference = os.path.join(work, "reference")
    run([VITPIPE, *e2e.train_args(init, "csv:" + csv, reference, *flags)])  # the stages as threads
    out = os.path.join(work, "run")
    train = [VITPIPE, *e2e.train_args(init, "csv:" + csv, out, *flags, "--comm-timeout", str(comm_timeout))]
    failures_log = os.path.join(out, "failures.log")
    with NamespacedHosts(2, rate="1gbit") as hosts:
        job = subprocess.Popen(hosts.mpirun(1, train), env=hosts.env(), stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
        latest = os.path.join(out, "checkpoints", "latest")
        deadline = time.monotonic() + 120
        while not os.path.exists(latest) and job.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if job.poll() is not None or not os.path.exists(latest):
            job.kill()
            sys.exit(f"FAIL: the 2-host run ended or wrote no checkpoint: {job.communicate()[1][-3000:]}")
        if fault in ("cut", "silent"):
            hosts.cut(1, silent=fault == "silent")
        else:
            victim = rank_pid_on(hosts, 1)
            assert victim, f"no rank found on host 1: {hosts.processes()}"
            os.kill(victim, signal.SIGKILL)
        cut_at = time.monotonic()
        try:
            _, stderr = job.communicate(timeout=END_WITHIN)
        except subprocess.TimeoutExpired:
            job.kill()
            _, stderr = job.communicate()
            print(stderr[-3000:])
            sys.exit(f"FAIL: mpirun still running {END_WITHIN} s after the {fault}")
        mpirun_took = time.monotonic() - cut_at
        while rank_processes(hosts) and time.monotonic() - cut_at < END_WITHIN:
            time.sleep(0.2)
        all_took = time.monotonic() - cut_at
        left = rank_processes(hosts)
        print(f"{fault}: mpirun exited {job.returncode} after {mpirun_took:.1f} s, the last rank or daemon was gone "
              f"after {all_took:.1f} s (--comm-timeout {comm_timeout})")
        assert not left, f"still running {END_WITHIN} s after the {fault}: {left}"
        assert job.returncode != 0, f"mpirun exited 0 after the {fault}"
        lines = open(failures_log).read().splitlines() if os.path.exists(failures_log) else []
        print("failures.log:\n  " + "\n  ".join(lines))
        # Each rank's line: its deadline passed, or (the launch recipe's keepalives notice the cut within 25 s)
        # its daemon ended it first, and it says what it was waiting for.
        # A rank killed with SIGKILL cannot speak: mpirun names it, and its peer says it was ended; the peer may be
        # between communications (writing a checkpoint) when mpirun's SIGTERM comes, so "while waiting" is optional.
        if fault == "kill":
            assert "exited on signal 9" in stderr, "mpirun does not name the killed rank:\n" + stderr[-3000:]
        # With a deadline shorter than the keepalives (silent), the ranks' own deadlines must be what ended them.
        for rank, host in ((0, 0), (1, 1)) if fault != "kill" else ((0, 0),):
            expected = [line for line in lines if line.startswith(f"error: rank {rank}: ") and
                        (f"did not complete in {comm_timeout} s" in line or
                         (fault != "silent" and "SIGTERM (" in line and
                         (" while waiting " in line or fault == "kill"))) and
                        f"[host {hosts.hostname(host)} {namespaced_hosts.address(host)}]" in line]
            assert expected, (f"rank {rank} on host {host} did not write its line to {failures_log}; mpirun's stderr:\n"
                              + stderr[-3000:])
        if fault != "kill":
            hosts.restore(1)
        resumed = run(hosts.mpirun(1, train + ["--resume"]), env=hosts.env())
        assert "2 MPI ranks" in resumed.stderr, resumed.stderr
    expected, _ = e2e.read_safetensors(os.path.join(reference, "model", "model.safetensors"))
    actual, _ = e2e.read_safetensors(os.path.join(out, "model", "model.safetensors"))
    difference, where = e2e.max_relative_difference(expected, actual)
    print(f"resumed across the hosts vs uninterrupted: max relative difference {difference} ({where or '-'})")
    same, detail = e2e.same_tensors(expected, actual)
    assert same, f"the resumed run differs from the uninterrupted one: {detail}"


def main():
    namespaced_hosts.skip_unless_possible()
    case = sys.argv[1]
    work = tempfile.mkdtemp(prefix=f"vitpipe_multihost_{case}_")
    try:
        if case == "equal.replicas1x2":
            case_equal(work, 1, [], "1 stage x 2 replicas (data parallel)")
        elif case == "equal.stages2x2":
            case_equal(work, 2, ["--pipeline-stages", "2"], "2 stages x 2 replicas")
        elif case == "lost-link":
            case_lost_peer(work, "cut")
        elif case == "silent-link":
            case_lost_peer(work, "silent", comm_timeout=8)
        elif case == "killed-rank":
            case_lost_peer(work, "kill")
        else:
            sys.exit(f"unknown case {case}")
    finally:
        if os.environ.get("VITPIPE_KEEP_TEMP"):
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print("PASS")


if __name__ == "__main__":
    main()
