"""Where enqueue -> start goes, segment by segment (issue 43, target 5).

Usage, from the project root, after `../shared/peers/vs-chasquimq.sh` built the
peers and Redis 8.6.3 (needs `tcpdump` and the right to capture on `lo`):

    python3 examples/bench/start_path.py [--rounds 3]
        [--peer redjob=target/peers-bench/redjob/target/release/redjob-bench]
        [--peer chasquimq=target/peers-bench/chasquimq/target/release/chasquimq-bench]

For each peer, alternating, it runs the peer harness's latency phase (`bench
worker --phase latency` and `bench produce-latency --n 2000 --rate 400`, each
a process of its own, on a fresh Redis 8.6.3; chasquimq with its event stream
off) while `tcpdump` captures the server's port, and splits each job's lag:

1. producer: the payload's stamp (taken before the call) to the send reaching
   the wire (redjob's `FCALL`, or `EVALSHA` on 6.2; chasquimq's `XADD`);
2. Redis: the send on the wire to the job on the worker's wire (redjob's
   hand-off message, chasquimq's `XREADGROUP` reply);
3. worker: the rest of the handler's lag (the total less the two before).

Medians of the runs' p50s (segments do not add up exactly: each is its own
median). Stdlib only.
"""

import argparse
import json
import os
import re
import statistics
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from script_cost import free_port  # noqa: E402

REDIS = "target/peers-bench/chasquimq/target/redis/bin/redis-server"


def packets(path):
    """(time, source port, destination port, TCP payload) of each packet."""
    data = open(path, "rb").read()
    link = struct.unpack("<I", data[20:24])[0]
    off = 24
    while off + 16 <= len(data):
        s, us, incl, _ = struct.unpack("<IIII", data[off:off + 16])
        b = data[off + 16:off + 16 + incl]
        off += 16 + incl
        e = 14 if link == 1 else 16
        if len(b) < e + 20:
            continue
        t = e + (b[e] & 15) * 4
        sport, dport = struct.unpack(">HH", b[t:t + 4])
        pay = b[t + (b[t + 12] >> 4) * 4:]
        if pay:
            yield s + us / 1e6, sport, dport, pay


def redjob_segments(path):
    sent, out = {}, {}
    for ts, _, _, b in packets(path):
        m = re.search(rb'"i":(\d+),"t":([\d.]+)', b)
        if not m:
            continue
        i, t = int(m.group(1)), float(m.group(2)) / 1e3
        if b"EVALSHA" in b or b"FCALL" in b:
            sent[i] = (ts, t)
        elif b"message" in b:
            out.setdefault(i, ts)
    return [((ts - t) * 1e6, (out[i] - ts) * 1e6) for i, (ts, t) in sent.items() if i in out]


def chasquimq_segments(path):
    pk = list(packets(path))
    sends = [(ts, sp, dp, b) for ts, sp, dp, b in pk if b"XADD" in b[:200].upper()]
    if not sends:
        return []
    server, producer = sends[0][2], sends[0][1]
    later = [(ts, b) for ts, sp, dp, b in pk if sp == server and dp != producer]
    seg, k = [], 0
    for ts, _, _, b in sends:
        # the payload [i, t]: a MessagePack array of an int and a float64 (ms)
        m = re.search(rb"\x92(?:[\x00-\x7f]|\xcc.|\xcd..|\xce....)\xcb(.{8})", b, re.S)
        if not m:
            continue
        t = struct.unpack(">d", m.group(1))[0] / 1e3
        while k < len(later) and later[k][0] <= ts:
            k += 1
        got = next((t2 for t2, b2 in later[k:k + 50] if m.group(1) in b2), None)
        if got:
            seg.append(((ts - t) * 1e6, (got - ts) * 1e6))
    return seg


def run(kind, binary, redis):
    port = free_port()
    srv = subprocess.Popen([redis, "--port", str(port), "--save", "", "--appendonly", "no"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        return measure(kind, os.path.abspath(binary), port)
    finally:
        srv.terminate()
        srv.wait()


def measure(kind, binary, port):
    time.sleep(0.4)
    env = dict(os.environ, REDIS_HOST="127.0.0.1", REDIS_PORT=str(port), BENCH_QUEUE="bench",
               CHASQUI_EVENTS="0")
    d = tempfile.mkdtemp()
    out, ready, pcap = (os.path.join(d, f) for f in ("out.json", "ready", "cap.pcap"))
    cwd = os.path.dirname(os.path.abspath(binary))
    worker = subprocess.Popen([binary, "worker", "--phase", "latency", "--n", "2000", "--concurrency", "32",
                               "--out", out, "--ready-file", ready, "--deadline-s", "60"],
                              env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(300):
        if os.path.exists(ready):
            break
        time.sleep(0.05)
    cap = subprocess.Popen(["tcpdump", "-i", "lo", "-s", "400", "-U", "-w", pcap, "tcp port %d" % port],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.5)
    subprocess.run([binary, "produce-latency", "--n", "2000", "--rate", "400"], env=env, cwd=cwd,
                   stdout=subprocess.DEVNULL, check=True)
    worker.wait(timeout=90)
    time.sleep(0.3)
    cap.terminate()
    cap.wait()
    lags = sorted(json.load(open(out))["samples_ms"])
    seg = (redjob_segments if kind == "redjob" else chasquimq_segments)(pcap)
    if len(seg) < len(lags) // 2:
        sys.exit("%s: only %d of %d sends found in the capture" % (kind, len(seg), len(lags)))
    p50 = lambda v: sorted(v)[len(v) // 2]  # noqa: E731
    total = p50(lags) * 1e3
    producer, redis_us = p50([a for a, _ in seg]), p50([b for _, b in seg])
    return producer, redis_us, total - producer - redis_us, total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--redis", default=REDIS)
    ap.add_argument("--peer", action="append", default=[])
    a = ap.parse_args()
    peers = [p.split("=", 1) for p in a.peer] or [
        ("redjob", "target/peers-bench/redjob/target/release/redjob-bench"),
        ("chasquimq", "target/peers-bench/chasquimq/target/release/chasquimq-bench")]
    res = {}
    for r in range(a.rounds):
        for name, binary in (peers if r % 2 == 0 else peers[::-1]):
            kind = "chasquimq" if "chasqui" in name else "redjob"
            res.setdefault(name, []).append(run(kind, binary, os.path.abspath(a.redis)))
        print("round %d done" % (r + 1), file=sys.stderr, flush=True)
    print("enqueue -> start at p50, µs (medians of %d runs)" % a.rounds)
    print("%-12s %10s %10s %10s %10s" % ("", "producer", "Redis", "worker", "total"))
    for name, _ in peers:
        cols = [statistics.median(x[i] for x in res[name]) for i in range(4)]
        print("%-12s %10.1f %10.1f %10.1f %10.1f" % (name, *cols))


if __name__ == "__main__":
    main()
