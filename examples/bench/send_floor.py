"""What one send costs inside Redis beside the fastest peer's (chasquimq's
`XADD`) (issue 43, targets 4 and 5).

Usage, from the project root:

    python3 examples/bench/send_floor.py [--rounds 3] [--n 1500]
        [--bench target/release/examples/bench]

It takes the send script a bench binary loads (it runs `--phase 1 --n 2000`
against its own redis-server and reads it off `MONITOR`), then, on a fresh
redis-server (the first on PATH), measures from one client:

1. Redis's time per call (`usec_per_call` of `INFO commandstats`), each
   call paced as the latency phase paces its sends ("cold": one every 2.5 ms,
   so the server idles between calls, as it does under an idle worker) and
   back to back ("hot", as one-by-one enqueues): chasquimq's send (`XADD`);
   the fixed cost of a script call (`return`, with the send's keys and
   arguments); the fewest commands a send in RSMQ's layout with Redis's clock
   can make (`HMGET` of the queue, `TIME`, `ZADD`, `HSET` of the body and
   `totalsent`), as a script and as a Redis function (7.0+, `FCALL`); the same
   with a hand-off (`PUBSUB NUMSUB` and `PUBLISH` to a waiting reader); and
   redjob's send script as its client calls it for one message (send.lua's
   lone call: without the lease counts when no worker waits, with them for
   a hand-off), with no worker waiting and with one (the worker's
   registration set before each send, as its fetch sets it), called as a
   script (`EVALSHA`, as on Redis 6.2) and as the Redis function redjob
   loads on 7.0+ (`FCALL`).
2. That each hand-off reached a waiting reader (`SUBSCRIBE`d, as a worker's
   notification connection; `XREAD BLOCK` for `XADD`), run in a process of
   its own. It does not time them: a Python reader's wake-up put a script's
   hand-off 0.08 ms behind `XADD` where two Rust clients measured 0.03
   (BENCHMARKS.md, Speed II part 13).

Medians of `--rounds` alternating rounds. Stdlib only (the RESP client is
../shared/peers/common/resp.py).
"""

import argparse
import multiprocessing
import os
import re
import socket
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from script_cost import Server, monitor_args, free_port  # noqa: E402

Q = "rsmq:bench"
KEYS = [Q, Q + ":Q", Q + ":leases", Q + ":exact"]
CHANNEL = "rsmq:w:floor"
BODY = '{"type":"bench","args":{"i":1}}'
COLD_EVERY = 0.0025

BARE = """
local a = redis.call("HMGET", KEYS[2], "delay", "maxsize", "totalsent", "redjob:waiting", "redjob:prio", "redjob:handoff")
local t = redis.call("TIME")
local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
%s
redis.call("ZADD", KEYS[1], ms, ARGV[5])
redis.call("HSET", KEYS[2], ARGV[5], ARGV[7], "totalsent", (tonumber(a[3]) or 0) + 1)
return {1, "x"}
"""
HAND_OFF = """
local subs = redis.call("PUBSUB", "NUMSUB", "%s")
if subs[2] > 0 then redis.call("PUBLISH", "%s", ARGV[5] .. " " .. ARGV[7]) end
""" % (CHANNEL, CHANNEL)


def capture_send(bench, redis_server):
    """The send script (send.lua as loaded) that `bench` loads, and its
    library where it loads one (Redis 7.0+), else None."""
    cli = os.path.join(os.path.dirname(redis_server), "redis-cli")
    port = free_port()
    srv = subprocess.Popen([redis_server, "--port", str(port), "--save", "", "--appendonly", "no"],
                           stdout=subprocess.DEVNULL)
    time.sleep(0.5)
    mon = subprocess.Popen([cli, "-p", str(port), "monitor"], stdout=subprocess.PIPE, text=True)
    time.sleep(0.3)
    env = dict(os.environ, REDIS_URL="redis://127.0.0.1:%d" % port)
    subprocess.run([bench, "--phase", "1", "--n", "2000", "--runs", "1"], env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    mon.terminate()
    out = mon.communicate()[0]
    srv.terminate()
    srv.wait()
    for line in out.splitlines():
        args = monitor_args(line)
        if len(args) > 2 and args[0].upper() == b"SCRIPT" and b"Sends messages to one queue" in args[2]:
            return args[2].decode(), None
        # a release that sends by a Redis function loads its library instead
        # (without comments: known by its name)
        if len(args) > 3 and args[0].upper() == b"FUNCTION" and b"#!lua name=redjob_send_" in args[-1]:
            library = args[-1].decode()
            return library_script(library), library
    sys.exit("no send script seen from %s" % bench)


def library_script(library):
    """The send script a send function's library was made of (see
    src/backend/redis/functions.rs): its lines after the shebang, without the
    library's additions."""
    lines = library.split("\n")[1:]
    lines[0] = lines[0].replace("local KEYS, ARGV ", "", 1)
    at = [i for i, l in enumerate(lines) if l.startswith("local function run() ")][0]
    lines[at] = lines[at][len("local function run() "):]
    end = [i for i, l in enumerate(lines) if l.startswith("redis.register_function(")][0]
    # (the "end" of run before it)
    return "\n".join(lines[:end - 1]) + "\n"


def as_function(library, name):
    """The send's library under another name, `name`, for its one function."""
    old = re.search(r"name=(\S+)", library).group(1)
    return library.replace(old, name)


def pace(i, t0, every):
    if every:
        target = t0 + i * every
        while True:
            left = target - time.perf_counter()
            if left <= 0:
                return
            time.sleep(left)


class Reader:
    """A second connection that waits for what the sends publish (or add to a
    stream) and counts what arrives. A process of its own, so that draining
    it takes nothing from the sender's interpreter."""

    def __init__(self, port, stream):
        self.port, self.stream = port, stream
        ctx = multiprocessing.get_context("fork")
        self.stop = ctx.Event()
        self.ready = ctx.Event()
        self.recv, send = ctx.Pipe(duplex=False)
        self.proc = ctx.Process(target=self.run, args=(send,), daemon=True)
        self.arrivals = 0

    def start(self):
        self.proc.start()
        if not self.ready.wait(5):
            sys.exit("the reader did not start")

    def read_block(self, sock, last):
        # one entry a read, each answer checked for a whole entry
        cmd = ["XREAD", "COUNT", "1", "BLOCK", "1000", "STREAMS", self.stream, last]
        sock.sendall(b"".join([b"*%d\r\n" % len(cmd)] + [b"$%d\r\n%s\r\n" % (len(a), a.encode()) for a in cmd]))

    def run(self, out):
        sock = socket.create_connection(("127.0.0.1", self.port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if not self.stream:
            sock.sendall(b"*2\r\n$9\r\nSUBSCRIBE\r\n$%d\r\n%s\r\n" % (len(CHANNEL), CHANNEL.encode()))
            sock.recv(1 << 16)
        sock.settimeout(0.2)
        # the stream is new: from its start, so that an entry added before the
        # first read reaches it is counted too
        last = "0"
        if self.stream:
            self.read_block(sock, last)
        self.ready.set()
        arrivals = 0
        buf, mark = b"", b"\r\nmessage\r\n"
        while not self.stop.is_set():
            try:
                data = sock.recv(1 << 20)
            except socket.timeout:
                continue
            if not data:
                break
            buf += data
            if self.stream:
                # a whole reply: an entry (it ends with the body) or a BLOCK
                # that timed out (a nil)
                if buf.startswith((b"*-1\r\n", b"_\r\n")):
                    buf = b""
                    self.read_block(sock, last)
                elif buf.endswith(BODY.encode() + b"\r\n"):
                    arrivals += 1
                    last = [p for p in buf.split(b"\r\n") if b"-" in p and p[:1].isdigit()][0].decode()
                    buf = b""
                    self.read_block(sock, last)
            else:
                # each message that arrived whole; the rest waits for more
                n = buf.count(mark)
                arrivals += n
                if n:
                    buf = buf[buf.rindex(mark) + len(mark):]
                buf = buf[-len(mark):] if len(buf) > 4096 else buf
        sock.close()
        out.send(arrivals)

    def close(self):
        self.stop.set()
        self.arrivals = self.recv.recv()
        self.proc.join()


def measure(s, label, call, n, every, reader=None, before=None):
    """Redis's µs per call of `call` (a command), each `every` s apart (0: back
    to back); with a reader, checks that each call reached it."""
    r = s.r
    r.cmd("CONFIG", "RESETSTAT")
    if reader:
        reader.start()
        # its first read waits at the server before the first send
        time.sleep(0.1)
    t0 = time.perf_counter()
    for i in range(n):
        if before:
            before(r)
        pace(i, t0, every)
        call(r, i)
    if reader:
        time.sleep(0.05)
        reader.close()
        if reader.arrivals != n:
            sys.exit("the reader saw %d of %d sends of %s" % (reader.arrivals, n, label))
    stats = s.r.info("commandstats")
    name = "cmdstat_xadd" if "cmdstat_xadd" in stats else (
        "cmdstat_fcall" if "cmdstat_fcall" in stats else "cmdstat_evalsha")
    us = float(dict(p.split("=", 1) for p in stats[name].split(","))["usec_per_call"])
    return us


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bench", default="target/release/examples/bench")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n", type=int, default=1500)
    a = ap.parse_args()
    import shutil
    redis_server = shutil.which("redis-server")
    send_lua, library = capture_send(a.bench, redis_server)
    s = Server(redis_server, False)
    r = s.r
    version = r.info("server")["redis_version"]
    functions = int(version.split(".")[0]) >= 7 and library is not None
    r.cmd("SADD", "rsmq:QUEUES", "bench")
    r.cmd("HSET", Q + ":Q", "vt", "30", "delay", "0", "maxsize", "65536", "created", "1", "modified", "1",
          "totalrecv", "0", "totalsent", "0")
    shas = {
        "return": r.cmd("SCRIPT", "LOAD", 'return {1, "x"}'),
        "bare": r.cmd("SCRIPT", "LOAD", BARE % ""),
        "bare_hand": r.cmd("SCRIPT", "LOAD", BARE % HAND_OFF),
        "send": r.cmd("SCRIPT", "LOAD", send_lua),
    }
    if functions:
        r.cmd("FUNCTION", "LOAD", "REPLACE", "#!lua name=floor\nredis.register_function('bare_send', function(KEYS, ARGV)"
              + BARE % "" + "end)")
        r.cmd("FUNCTION", "LOAD", "REPLACE", as_function(library, "send_fn"))
    seq = [0]

    def argv():
        seq[0] += 1
        return ["rsmq:rt:bench", "0", str(len(BODY)), "0", "%022d" % seq[0], "", BODY]

    last = [None]

    def lone(nkeys, args):
        """send.lua's lone call as the client makes it for one message: the
        sorted set and the hash, with the lease counts (nkeys 3) when a
        worker may be handed it; the channel, the id suffix, when, the body."""
        return KEYS[:nkeys] + [args[0], args[4], args[5], args[6]]

    def evalsha(name, nkeys=len(KEYS)):
        def call(r, i):
            args = argv()
            if name == "send":
                reply = r.cmd("EVALSHA", shas[name], nkeys, *lone(nkeys, args))
            else:
                reply = r.cmd("EVALSHA", shas[name], len(KEYS), *KEYS, *args)
            # send.lua's ids are its reply's prefix and the suffix sent
            last[0] = (reply[1] if name == "send" else "") + args[4]
        return call

    def empty(r):
        # the last send's message leaves, as a worker takes it: the queue
        # stays as short as under an idle worker (a sorted set or hash that
        # grew instead would change what each write costs; a stream's entries
        # stay, as appending costs the same at any length)
        if last[0]:
            r.cmd("ZREM", Q, last[0])
            r.cmd("HDEL", Q + ":Q", last[0])
            last[0] = None
        r.cmd("DEL", Q + ":leases")

    def register(r):
        empty(r)
        # a waiting worker's registration, as its fetch sets it (see fetch.lua)
        r.cmd("HSET", Q + ":Q", "redjob:handoff", "v2 30000 %s bench" % CHANNEL)

    def fcall(r, i):
        args = argv()
        r.cmd("FCALL", "bare_send", len(KEYS), *KEYS, *args)
        last[0] = args[4]

    def fcall_send(nkeys):
        def call(r, i):
            args = argv()
            reply = r.cmd("FCALL", "send_fn", nkeys, *lone(nkeys, args))
            last[0] = reply[1] + args[4]
        return call

    rows = [
        ("XADD (chasquimq's send)", lambda r, i: r.cmd("XADD", "bench:s", "*", "d", BODY), empty, "bench:s"),
        ("a script's call alone (return)", evalsha("return"), empty, None),
        ("the fewest commands: HMGET, TIME, ZADD, HSET", evalsha("bare"), empty, None),
    ]
    if functions:
        rows.append(("the same as a Redis function (FCALL)",
                     fcall, empty, None))
    rows += [
        ("the fewest + PUBSUB NUMSUB, PUBLISH (a hand-off)", evalsha("bare_hand"), empty, CHANNEL),
        ("send.lua, no worker waiting", evalsha("send", 2), empty, None),
        ("send.lua, a worker waiting (a hand-off)", evalsha("send", 3), register, CHANNEL),
    ]
    if functions:
        rows += [
            ("send.lua as a function (FCALL), no worker waiting", fcall_send(2), empty, None),
            ("send.lua as a function (FCALL), a hand-off", fcall_send(3), register, CHANNEL),
        ]
    res = {}
    for rnd in range(a.rounds):
        for label, call, before, reads in (rows if rnd % 2 == 0 else rows[::-1]):
            for kind, every in (("cold", COLD_EVERY), ("hot", 0)):
                r.cmd("DEL", Q, Q + ":leases", "bench:s")
                # a hand-off needs its reader subscribed, cold or hot; a
                # stream's reader (one entry a read) keeps up cold only
                reader = None
                if reads == CHANNEL or (reads and kind == "cold"):
                    reader = Reader(s.port, None if reads == CHANNEL else reads)
                res.setdefault((label, kind), []).append(measure(s, label, call, a.n, every, reader, before))
            print("round %d: %s done" % (rnd + 1, label), file=sys.stderr, flush=True)
    s.close()
    med = lambda k: statistics.median(res[k]) if k in res else None  # noqa: E731
    rng = lambda k: "%.1f-%.1f" % (min(res[k]), max(res[k]))  # noqa: E731
    print("Redis %s, %d calls a run, %d rounds; medians (min-max)" % (version, a.n, a.rounds))
    print("%-50s %22s %22s" % ("one send, inside Redis (usec_per_call)", "cold (2.5 ms apart)", "hot (back to back)"))
    for label, *_ in rows:
        print("%-50s %8.1f (%11s) %8.1f (%11s)" % (label, med((label, "cold")), rng((label, "cold")),
                                                 med((label, "hot")), rng((label, "hot"))))


if __name__ == "__main__":
    main()
