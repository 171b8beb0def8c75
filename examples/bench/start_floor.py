#!/usr/bin/env python3
"""Target 5 in rounds: enqueue -> start, the peer harness's latency phase for
redjob and chasquimq (events off) beside the floors on bare sockets
(`bench start-floor`, start_floor.rs). Each run gets a fresh redis-server;
the contestants alternate within each round. BENCHMARKS.md, Speed II part 27.

Run from the project root, after `../shared/peers/vs-chasquimq.sh` built the
harness and Redis 8.6.3 and `cargo build --release --example bench`:

    python3 examples/bench/start_floor.py [--rounds 8] [--n 2000] [--rate 400]
        [--only chasquimq,redjob,stream,layout,plain,settled]

A contestant `redjob=PATH` is the redjob harness's binary at PATH (another
build beside this one). A redjob worker that writes `<out>.split` (a list
of [stamp -> Redis's clock at the send, that -> the handler] in ms, from the
job id's microseconds) gets its lag split as the floor's runs in RSMQ's
layout are (BENCHMARKS.md, Speed II part 27, says what makes such a build).

Prints each run's p50 and p99 (ms), then each contestant's medians (min-max)
and the median of its per-round ratio to chasquimq's.
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import time

ROOT = os.getcwd()
W = os.path.join(ROOT, "target/peers-bench")
RS = os.path.join(W, "chasquimq/target/redis/bin/redis-server")
BENCH = os.path.join(ROOT, "target/release/examples/bench")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def pct(xs, p):
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100
    f = int(k)
    c = min(f + 1, len(xs) - 1)
    return xs[f] + (xs[c] - xs[f]) * (k - f)


def commands(name, n, rate, out, ready):
    """The worker's and the producer's command lines for a contestant."""
    if name in ("chasquimq", "redjob") or name.startswith("redjob="):
        b = os.path.join(W, name, "bench")
        if name.startswith("redjob="):
            b = name.split("=", 1)[1]
        return ([b, "worker", "--phase", "latency", "--n", str(n), "--concurrency", "32",
                 "--out", out, "--ready-file", ready, "--deadline-s", "30", "--linger-ms", "500"],
                [b, "produce-latency", "--n", str(n), "--rate", str(rate)])
    return ([BENCH, "start-floor", "worker", "--kind", name, "--n", str(n), "--out", out,
             "--ready-file", ready, "--deadline-s", "30"],
            [BENCH, "start-floor", "produce", "--kind", name, "--n", str(n), "--rate", str(rate)])


def run(name, n, rate):
    port = free_port()
    d = tempfile.mkdtemp(prefix="start-floor-")
    srv = subprocess.Popen([RS, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                            "--appendonly", "no", "--dir", d], stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.4)
        env = dict(os.environ, REDIS_HOST="127.0.0.1", REDIS_PORT=str(port),
                   BENCH_QUEUE="bench", CHASQUI_EVENTS="0")
        out, ready = os.path.join(d, "out.json"), os.path.join(d, "ready")
        wcmd, pcmd = commands(name, n, rate, out, ready)
        w = subprocess.Popen(wcmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        t = time.time()
        while not os.path.exists(ready) and time.time() - t < 20:
            time.sleep(0.01)
        time.sleep(1.0)
        try:
            subprocess.run(pcmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           check=True, timeout=120)
            w.wait(timeout=60)
        finally:
            if w.poll() is None:
                w.kill()
                w.wait()
        got = json.load(open(out))
        s = got.get("samples_ms") or []
        if len(s) < n:
            raise SystemExit(f"{name}: {len(s)} of {n} jobs started")
        split = got.get("split_ms")
        if split is None and os.path.exists(out + ".split"):
            split = json.load(open(out + ".split"))
        halves = None
        if split:
            halves = tuple(pct([x[k] for x in split], q) for k in (0, 1) for q in (50, 99))
        return pct(s, 50), pct(s, 99), halves
    finally:
        srv.terminate()
        srv.wait()
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--rate", type=float, default=400)
    ap.add_argument("--only", default="chasquimq,redjob,stream,layout,plain,settled")
    a = ap.parse_args()
    names = a.only.split(",")
    res = {k: [] for k in names}
    for r in range(a.rounds):
        for name in names:
            res[name].append(run(name, a.n, a.rate))
            p50, p99, halves = res[name][-1]
            line = "%d %s p50 %.3f p99 %.3f" % (r + 1, name, p50, p99)
            if halves:
                line += "; stamp -> Redis's clock p50 %.3f p99 %.3f, -> start p50 %.3f p99 %.3f" % halves
            print(line, flush=True)
    for name, v in res.items():
        p50, p99 = [x[0] for x in v], [x[1] for x in v]
        line = "%-10s p50 %.3f (%.3f-%.3f) p99 %.3f (%.3f-%.3f)" % (
            name, statistics.median(p50), min(p50), max(p50),
            statistics.median(p99), min(p99), max(p99))
        if "chasquimq" in res and name != "chasquimq":
            r50 = [b[0] / c[0] for c, b in zip(res["chasquimq"], v)]
            r99 = [b[1] / c[1] for c, b in zip(res["chasquimq"], v)]
            line += "; per round to chasquimq p50 %.3f (%d of %d at or below), p99 %.3f (%d of %d)" % (
                statistics.median(r50), sum(x <= 1 for x in r50), len(r50),
                statistics.median(r99), sum(x <= 1 for x in r99), len(r99))
        halves = [x[2] for x in v if x[2]]
        if halves:
            line += "\n%-10s stamp -> Redis's clock p50 %.3f p99 %.3f, -> start p50 %.3f p99 %.3f (medians)" % (
                "", *(statistics.median(h[k] for h in halves) for k in range(4)))
        print(line, flush=True)


if __name__ == "__main__":
    main()
