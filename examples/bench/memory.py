"""Where a queued job's bytes go in RSMQ's layout (issue 43, target 6).

Usage, from the project root:

    python3 examples/bench/memory.py <redis-server> [<redis-server> ...]

For each binary it starts a server (--save "" --appendonly no, a free
loopback port), queues N jobs in one queue the way RSMQ's layout keeps them
(the id, 32 chars, in the sorted set `ns:q` scored by its due ms, and
id -> body in the hash `ns:q:Q`), and prints bytes per job: `used_memory`'s
growth, and `MEMORY USAGE ... SAMPLES 0` of each key. It does so with each
structure alone, with RSMQ's bare payload and with redjob's envelope around
it (what `Client::enqueue` stores: nothing else is written per job), and with
bodies 64 bytes longer, to split a job's cost into the id's two copies, the
per-entry overhead and the body. Stdlib only (the RESP client is
../shared/peers/common/resp.py).
"""

import os
import random
import socket
import string
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "peers", "common"))
from resp import Resp  # noqa: E402

N = 20000
ALPHABET = string.digits + string.ascii_lowercase


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(binary):
    port = free_port()
    d = tempfile.mkdtemp(prefix="redjob-mem-")
    p = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", d],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(200):
        try:
            r = Resp(port=port)
            r.cmd("PING")
            return p, r
        except OSError:
            time.sleep(0.05)
    p.kill()
    raise SystemExit(f"{binary} did not start")


def used(r):
    return r.memory()["used_memory"]


def ids(n):
    """RSMQ's ids: 10 base-36 chars of the send's µs, then 22 random ones."""
    base = int(time.time() * 1e6)
    out = []
    for k in range(n):
        t, s = base + k, ""
        while t:
            t, c = divmod(t, 36)
            s = ALPHABET[c] + s
        out.append(s[-10:].rjust(10, "0") + "".join(random.choice(ALPHABET) for _ in range(22)))
    return out


def fill(r, zset, hash_, body, n):
    """n jobs: the zset and/or the hash (RSMQ's send writes both)."""
    now = int(time.time() * 1000)
    batch = 500
    jids = ids(n)
    for i in range(0, n, batch):
        chunk = jids[i : i + batch]
        cmds = []
        if zset:
            z = ["ZADD", "ns:q"]
            for j in chunk:
                z += [now, j]
            cmds.append(z)
        if hash_:
            h = ["HSET", "ns:q:Q"]
            for k, j in enumerate(chunk):
                h += [j, body(i + k)]
            cmds.append(h)
        for c in cmds:
            r.cmd(*c)


def measure(r, zset, hash_, body):
    r.cmd("FLUSHALL")
    # the queue's own hash fields, as a queue has them before its first job
    r.cmd("HSET", "ns:q:Q", "vt", 30, "delay", 0, "maxsize", 65536, "created", 1, "modified", 1, "totalsent", 0)
    before = used(r)
    fill(r, zset, hash_, body, N)
    after = used(r)
    z = r.cmd("MEMORY", "USAGE", "ns:q", "SAMPLES", "0") or 0
    h = r.cmd("MEMORY", "USAGE", "ns:q:Q", "SAMPLES", "0") or 0
    return (after - before) / N, z / N, h / N


BARE = lambda n: '{"i": %d}' % n  # noqa: E731
ENVELOPE = lambda n: '{"type":"bench","args":{"i": %d}}' % n  # noqa: E731
LONGER = lambda n: ('{"i": %d}' % n) + " " * 64  # noqa: E731


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    for binary in sys.argv[1:]:
        p, r = start(binary)
        try:
            version = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.split()[2]
            print(f"\n{version} ({N} jobs; bytes per job)")
            print(f"{'what is queued':<52} {'used_memory':>11} {'ns:q':>6} {'ns:q:Q':>7}")
            rows = [
                ("the sorted set alone (the id, scored)", True, False, BARE),
                ("the hash alone, bare payload (id -> {\"i\": n})", False, True, BARE),
                ("RSMQ's send: both, bare payload", True, True, BARE),
                ("redjob's enqueue: both, its envelope", True, True, ENVELOPE),
                ("both, the bare payload + 64 bytes", True, True, LONGER),
            ]
            for name, zset, hash_, body in rows:
                u, z, h = measure(r, zset, hash_, body)
                print(f"{name:<52} {u:>11.1f} {z:>6.1f} {h:>7.1f}")
        finally:
            p.kill()
            p.wait()


if __name__ == "__main__":
    main()
