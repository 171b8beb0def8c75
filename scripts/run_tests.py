#!/usr/bin/env python3
"""Runs the workspace's test binaries, a few at a time (scripts/test calls it).

`cargo test` runs its test binaries one after another. Most of ours wait on
Redis servers, worker processes and clocks, not on the CPU, so on a 2-core
machine the suite spends most of its time idle: this builds every test binary
once (`cargo test --no-run`, the same build `cargo test` makes), then runs
them and the doc tests side by side as far as the cores allow (`COST` below),
the longest first. Each binary runs as `cargo test` runs
it: from its package's directory, with the package's `CARGO_*` variables.
A binary's output is printed whole when it ends; every failure is listed at
the end, not just the first, and the exit status is 1 when any failed.

Arguments go to `cargo test` (as `--no-run`'s build and the doc tests').
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

# What each run took in a sequential run on a 2-core machine (session 73):
# seconds, and the cores it kept busy on average (its process's and its
# redis-servers' CPU time over its wall time; 0.3 for the shortest). Runs
# start the longest first. A run of ALONE cores or more runs alone (the
# conformance suites, chaos, the million-event tests, trybuild's compile):
# beside other runs, their tests failed on timeouts and on timing. The
# others start beside each other while the cores of all those going stay
# within CAPACITY. A run not listed counts as (10 s, 1 core): alone.
COST = {
    "doc tests": (27.9, 1.00),
    "conformance_cluster": (36.2, 0.57),
    "conformance_valkey": (32.5, 0.75),
    "conformance_redis": (30.9, 0.70),
    "reliability_batches": (29.5, 1.57),
    "conformance_redis_6_2": (27.8, 0.72),
    "reliability_redis": (21.7, 0.36),
    "conformance_model": (17.3, 0.29),
    "worker_redis": (16.8, 0.11),
    "worker_periodic": (16.3, 0.09),
    "sentinel_failover": (16.3, 0.91),
    "client_connection": (15.7, 0.03),
    "reliability_worker": (13.2, 0.16),
    "reliability_chaos": (12.5, 1.75),
    "reliability_topics": (12.0, 0.11),
    "cluster_failover": (10.8, 1.09),
    "worker_limits": (9.4, 0.13),
    "cluster_queues": (9.1, 0.18),
    "web_browser": (8.6, 0.62),
    "worker_handoff": (7.6, 0.16),
    "topic_bounds": (7.6, 1.24),
    "cluster_migration": (7.6, 0.42),
    "worker_hooks": (6.0, 0.05),
    "queue_interop": (5.2, 1.29),
    "cli_reach": (5.2, 0.02),
    "client_acl": (4.5, 0.20),
    "worker_control": (4.4, 0.07),
    "lib redjob": (4.4, 1.98),
    "conformance_memory": (4.3, 1.77),
    "queue_functions": (3.7, 1.76),
    "queue_bounds": (3.6, 1.50),
    "client_enqueue": (3.5, 1.20),
    "reliability_flows": (3.4, 0.06),
    "reliability_flow_limits": (3.3, 1.36),
    "cli_commands": (2.6, 1.15),
    "worker_metrics": (2.3, 0.26),
    "queue_interop_python": (2.1, 0.57),
    "client_tls": (2.1, 0.38),
    "queue_redis": (1.9, 0.58),
    "worker_fairness": (1.8, 0.83),
    "ui": (62.0, 1.00),
    "testing_idle": (1.5, 1.20),
    "topic_interop": (1.4, 0.50),
    "web_pages": (1.3, 0.77),
    "reliability_input": (1.2, 1.42),
    "cli_mistakes": (1.2, 1.00),
    "web_worker_controls": (0.9, 0.22),
    "web_markup": (0.9, 0.67),
    "testing_topics": (0.9, 1.78),
    "cli_workers": (0.8, 0.25),
    "web_running": (0.7, 0.29),
    "queue_history_scale": (0.7, 1.43),
    "cli_worker_controls": (0.7, 0.43),
    "queue_history": (0.6, 0.83),
    "worker_ready": (0.5, 0.20),
    "worker_layout": (0.5, 0.20),
    "web_names": (0.5, 0.40),
    "testing_periodic": (0.4, 1.75),
    "queue_delays": (0.4, 0.50),
    "cli_registry": (0.4, 0.75),
    "cli_attempts": (0.4, 1.25),
    "web_history": (0.3, 0.30),
    "web_confirm": (0.3, 0.30),
    "cli_web_auth": (0.3, 0.30),
    "cli_stats": (0.3, 0.30),
    "cli_controls": (0.3, 0.30),
    "cli_confirm": (0.3, 0.30),
    "web_topics": (0.2, 0.30),
    "web_settings": (0.2, 0.30),
    "web_queue_create": (0.2, 0.30),
    "web_hours": (0.2, 0.30),
    "web_find": (0.2, 0.30),
    "web_access": (0.2, 0.30),
    "testing_kit": (0.2, 0.30),
    "queue_settings": (0.2, 0.30),
    "worker_traces": (0.0, 0.30),
    "worker_queues": (0.0, 0.30),
    "worker_names": (0.0, 0.30),
    "worker_logs": (0.0, 0.30),
    "worker_data": (0.0, 0.30),
    "testing_observe": (0.0, 0.30),
    "testing_first_week": (0.0, 0.30),
    "proc-macro redjob_macros": (0.0, 0.30),
    "memory_clock": (0.0, 0.30),
    "lib redjob_web": (0.0, 0.30),
    "job_macro_rules": (0.0, 0.30),
    "job_envelope": (0.0, 0.30),
    "docs_links": (0.0, 0.30),
    "bin redjob": (0.0, 0.30),
}
CAPACITY = 1.2
ALONE = 0.5
UNKNOWN = (10.0, 1.0)


def binaries(cargo_args):
    """Builds the test binaries; returns (name, kind, executable, package dir)."""
    cmd = ["cargo", "test", "--no-run", "--message-format=json-render-diagnostics"]
    out = subprocess.run(cmd + cargo_args, stdout=subprocess.PIPE, check=False, text=True)
    if out.returncode != 0:
        sys.exit(out.returncode)
    found = []
    for line in out.stdout.splitlines():
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
            continue
        if not msg.get("profile", {}).get("test"):
            continue
        name = msg["target"]["name"]
        kind = msg["target"]["kind"][0]
        found.append((name, kind, msg["executable"], os.path.dirname(msg["manifest_path"])))
    return found


def package_name(dir_):
    """The `name` of the package whose Cargo.toml is in `dir_`."""
    with open(os.path.join(dir_, "Cargo.toml"), encoding="utf-8") as f:
        in_package = False
        for line in f:
            line = line.strip()
            if line.startswith("["):
                in_package = line == "[package]"
            elif in_package and line.startswith("name"):
                return line.split("=", 1)[1].strip().strip('"')
    return ""


def main():
    cargo_args = sys.argv[1:]
    found = binaries(cargo_args)
    cargo = shutil.which("cargo") or "cargo"
    # a proc-macro crate's test binary links the toolchain's libstd
    # dynamically: cargo puts the toolchain's and the build's library
    # directories on the loader's path, and so does this
    libdir = subprocess.run(
        ["rustc", "--print", "target-libdir"], stdout=subprocess.PIPE, text=True, check=True
    ).stdout.strip()
    runs = []
    for name, kind, exe, pkg_dir in found:
        env = dict(os.environ)
        env["CARGO"] = cargo
        env["CARGO_MANIFEST_DIR"] = pkg_dir
        env["CARGO_PKG_NAME"] = package_name(pkg_dir)
        env["CARGO_CRATE_NAME"] = name.replace("-", "_")
        paths = [os.path.dirname(exe), libdir, env.get("LD_LIBRARY_PATH", "")]
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in paths if p)
        key = name if kind == "test" else f"{kind} {name}"
        label = f"{kind} {name} ({os.path.relpath(exe)})"
        runs.append((key, label, [exe], pkg_dir, env))
    # the doc tests, as `cargo test` runs them after the binaries
    doc = ["cargo", "test", "--doc"] + cargo_args
    runs.append(("doc tests", "doc tests", doc, os.getcwd(), dict(os.environ)))
    runs.sort(key=lambda r: -COST.get(r[0], UNKNOWN)[0])

    cond = threading.Condition()
    failed = []
    pending = list(runs)
    busy = []  # the cores of the runs going
    started = time.monotonic()

    def take():
        """The longest pending run that fits beside those going (under `cond`)."""
        while pending:
            load = sum(busy)
            for i, run in enumerate(pending):
                cores = COST.get(run[0], UNKNOWN)[1]
                if cores >= ALONE:
                    cores = CAPACITY + 1
                if not busy or load + cores <= CAPACITY + 1e-9:
                    busy.append(cores)
                    return pending.pop(i), cores
            cond.wait()
        return None, 0

    def worker():
        while True:
            with cond:
                run, cores = take()
            if run is None:
                return
            _, label, cmd, cwd, env = run
            t0 = time.monotonic()
            with tempfile.TemporaryFile(mode="w+") as log:
                child = subprocess.Popen(
                    cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT
                )
                _, status, usage = os.wait4(child.pid, 0)
                code = os.waitstatus_to_exitcode(status)
                log.seek(0)
                text = log.read()
            took = time.monotonic() - t0
            cpu = usage.ru_utime + usage.ru_stime
            with cond:
                busy.remove(cores)
                cond.notify_all()
                print(f"     Running {label}: {took:.1f} s, CPU {cpu:.1f} s", flush=True)
                sys.stdout.write(text)
                sys.stdout.flush()
                if code != 0:
                    failed.append(f"{label}: exit {code}")

    # as many threads as runs could ever go side by side
    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    took = time.monotonic() - started
    print(f"{len(runs)} test runs in {took:.0f} s")
    if failed:
        print("FAILED:", file=sys.stderr)
        for f in failed:
            print(f"  {f}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
