#!/usr/bin/env python3
"""Runs the test binaries `cargo test --no-run --message-format=json` built,
a few at once: most of redjob's tests wait on Redis servers, worker
processes and clocks, so one binary after another (what `cargo test` does)
leaves the machine idle for much of the run.

    scripts/run-tests.py <cargo's JSON messages> [--also '<command>'] [-- <arguments for each binary>]

Each binary runs in its package's directory, as under `cargo test`; its
output is printed whole once it ends (not interleaved with the others'),
and a summary at the end lists the binaries that failed. `--also` runs a
command first (the doc tests), its output shown as a binary's. Exits 1 when any
did. `REDJOB_TEST_JOBS` sets how many run at once (2 by default).
"""

import json
import os
import shlex
import subprocess
import sys
import tempfile
import threading
import time

# the binaries that compile as they run (trybuild's crate), run one at a
# time before the others, as the `--also` commands (the doc tests compile
# too): they take both cores, and the tests beside them would wait on clocks
# and Redis servers that the compiler starves
ALONE_FIRST = ["ui"]  # 106 s (trybuild builds its own crate)

# the binaries that take longest, started first so that they do not end
# the run alone (seconds on a 2-core machine, run one by one)
SLOW_FIRST = [
    "conformance",  # 134
    "queue_interop_mixed",  # 65 (a key's holder freed by the minute's sweep)
    "reliability_batches",  # 30
    "worker_redis",  # 26
    "conformance_model",  # 24
    "reliability_redis",  # 22
    "sentinel_failover",  # 16
    "worker_periodic",  # 16
    "client_connection",  # 16
    "reliability_worker",  # 16
    "reliability_chaos",  # 12
    "reliability_topics",  # 12
    "cluster_queues",  # 11
    "reliability_settle",  # 11
    "cluster_failover",  # 10
]


def binaries(listing):
    """The test executables in cargo's JSON messages, with their package's
    directory and a name to show: (name, path, cwd)."""
    found = []
    with open(listing) as f:
        for line in f:
            if not line.startswith("{"):
                continue
            m = json.loads(line)
            if m.get("reason") != "compiler-artifact":
                continue
            if not m.get("profile", {}).get("test") or not m.get("executable"):
                continue
            target = m["target"]
            cwd = os.path.dirname(m["manifest_path"])
            kind = target["kind"][0]
            if kind == "lib":
                name = "unittests " + os.path.relpath(target["src_path"], os.getcwd())
            elif kind == "bin":
                name = "unittests bin " + target["name"]
            else:
                name = os.path.relpath(target["src_path"], os.getcwd())
            found.append((target["name"], name, [m["executable"]], cwd))
    order = {n: i for i, n in enumerate(SLOW_FIRST)}
    found.sort(key=lambda b: order.get(b[0], len(order)))
    return found


def library_path(todo):
    """The dynamic library path cargo gives the tests it runs: the binaries'
    own directories and the toolchain's libraries (a proc-macro crate's unit
    tests link the standard library dynamically)."""
    sysroot = subprocess.run(
        ["rustc", "--print", "sysroot"], capture_output=True, text=True, check=True
    ).stdout.strip()
    host = subprocess.run(
        ["rustc", "--print", "host-tuple"], capture_output=True, text=True
    ).stdout.strip()
    dirs = sorted({os.path.dirname(argv[0]) for _, _, argv, _ in todo if argv[0].startswith("/")})
    dirs += [os.path.join(sysroot, "lib")]
    if host:
        dirs.append(os.path.join(sysroot, "lib", "rustlib", host, "lib"))
    old = os.environ.get("LD_LIBRARY_PATH")
    return ":".join(dirs + ([old] if old else []))


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    listing, extra = args[0], args[1:]
    also = []
    while len(extra) >= 2 and extra[0] == "--also":
        also.append(shlex.split(extra[1]))
        extra = extra[2:]
    if extra and extra[0] == "--":
        extra = extra[1:]
    jobs = max(1, int(os.environ.get("REDJOB_TEST_JOBS", "2")))
    todo = binaries(listing)
    alone = [b for b in todo if b[0] in ALONE_FIRST]
    alone += [(cmd[0], " ".join(cmd), cmd, os.getcwd()) for cmd in also]
    todo = [b for b in todo if b[0] not in ALONE_FIRST]
    os.environ["LD_LIBRARY_PATH"] = library_path(todo + alone)
    lock = threading.Lock()
    failed = []
    results = []
    started = time.monotonic()

    def run_one(entry):
        _, name, argv, cwd = entry
        t0 = time.monotonic()
        try:
            with tempfile.TemporaryFile() as out:
                if argv[0].startswith("/"):
                    argv = [*argv, *extra]
                code = subprocess.call(argv, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
                out.seek(0)
                output = out.read()
        except Exception as e:  # a binary that cannot be started fails
            code, output = f"not run: {e}", b""
        took = time.monotonic() - t0
        with lock:
            # counted before anything is printed: a write that fails loses no failure
            results.append((took, name))
            if code != 0:
                failed.append(f"{name} (exit {code})")
            sys.stdout.write(f"     Running {name} [{took:.1f} s]\n")
            sys.stdout.flush()
            sys.stdout.buffer.write(output)
            sys.stdout.buffer.flush()

    for entry in alone:
        run_one(entry)
    queue = list(todo)
    queue_lock = threading.Lock()

    def lane():
        while True:
            with queue_lock:
                if not queue:
                    return
                entry = queue.pop(0)
            run_one(entry)

    lanes = [threading.Thread(target=lane) for _ in range(min(jobs, len(todo)))]
    for t in lanes:
        t.start()
    for t in lanes:
        t.join()

    wall = time.monotonic() - started
    print(
        f"\n{len(alone)} alone, then {len(todo)} test binaries {jobs} at a time, in {wall:.0f} s; the slowest:"
    )
    for took, name in sorted(results, reverse=True)[:8]:
        print(f"  {took:7.1f} s  {name}")
    # a lane that died (the runner's own error) leaves binaries unrun
    if len(results) != len(todo) + len(alone):
        failed.append(f"{len(todo) + len(alone) - len(results)} test binaries not run")
    if failed:
        print("\nerror: test binaries failed:\n  " + "\n  ".join(failed), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
