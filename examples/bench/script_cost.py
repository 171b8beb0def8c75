"""What the fetch and settle scripts cost Redis a job, without a worker's noise
(issue 43, targets 1 and 3).

Usage, from the project root:

    python3 examples/bench/script_cost.py [--callgrind | --split] [--n 3000]
        [--rounds 5] [--bench target/release/examples/bench]
        [--baseline <older bench>] [--functions] [--seen]

It takes the scripts a bench binary loads (it runs `--phase 1 --n 2000`
against its own redis-server and reads them off `MONITOR`), then drains a
queue of `--n` jobs with them from one client, in lockstep: a fetch of up to
256 (`fetch.lua`), then the settle of what it leased as acks (`complete.lua`),
until the queue is empty. It does the same with the two minimal scripts of
the bench's phase 18 floor (FETCH and ACK in floor.rs: only what any fenced
fetch + ack with this history must do), and, with `--baseline`, with the
scripts of an older bench binary (bd4be8e's calling convention, which has no
history, at its own fetch size of 32), and, with `--functions`, with this
code's two scripts loaded as Redis functions (7.0+), called by `FCALL`: each
a library whose `lib.lua` part runs once, at `FUNCTION LOAD`, and whose Lua
state holds only that library. Each runs with the history at its
defaults (full: every settle trims) and off.

It prints Redis's work per job: by default its CPU (`INFO cpu`, user + sys,
medians of `--rounds` alternating runs: this machine's noise applies), or
with `--callgrind` the instructions it ran, counted by valgrind's callgrind
between two dumps (deterministic to about 1 %, kernel time not included;
valgrind must be installed, and one run is enough). With `--split` it prints
each script's time inside Redis per job (`INFO commandstats` read around each
call) at fetches of 32 and of 256, and what the two sizes imply: a call's
fixed time and its time per job beyond it.

The redis-server is the first on PATH (`../shared/peers/vs-chasquimq.sh`
builds 8.6.3 under target/peers-bench). Stdlib only (the RESP client is
../shared/peers/common/resp.py).
"""

import argparse
import glob
import os
import random
import re
import shutil
import socket
import statistics
import string
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "peers", "common"))
from resp import Resp  # noqa: E402

ALPHABET = string.digits + string.ascii_lowercase
Q = "rsmq:bench"
# the ninth (ns:q:unique) since session 80; older scripts, without priorities
# in use, read no key past their eighth
FETCH_KEYS = [Q, Q + ":Q", Q + ":leases", Q + ":exact", Q + ":starts", Q + ":keyed", Q + ":keys", Q + ":kwake",
              Q + ":unique"]
COMPLETE_KEYS = [Q, Q + ":Q", Q + ":dead", Q + ":dead:Q", Q + ":stats", Q + ":unique", Q + ":leases",
                 Q + ":history:ids", Q + ":history:Q", Q + ":keyed", Q + ":keys", Q + ":kwake", Q + ":awaited",
                 Q + ":bout", Q + ":bres", Q + ":deps"]
WORKER = ',"worker":"51ee46b0-7611-46f1-9992-671d55c41472","host":"vm"'
HISTORY = {"on": "1 1000 86400000 3600000", "off": "0 1000 86400000 3600000"}
# bd4be8e's leases were scored from this offset on (LEGACY in lib.lua)
LEGACY = 4_000_000_000_000

# the minimal scripts are the bench's phase 18 floor (FETCH and ACK in floor.rs)
FLOOR_RS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "floor.rs")
# their fixed lease (a score above every due job's)
MIN_TOKEN = "9000000000000.501"


def floor_script(name):
    """The Lua text of `const <name>: &str = r#"..."#;` in floor.rs."""
    with open(FLOOR_RS) as f:
        m = re.search(r'const %s: &str = r#"(.*?)"#;' % name, f.read(), re.S)
    if not m:
        sys.exit("no %s script in %s" % (name, FLOOR_RS))
    return m.group(1)


def as_library(name, text, header):
    """A captured script (lib.lua's part, then the script from its `header`
    line on) as a function library `name` whose function runs it, as
    functions.rs builds one: the library's part defined once, the script's
    run per call."""
    at = text.index(header)
    return ("#!lua name=%s\nlocal KEYS, ARGV\n%s\nlocal function run()\n%s\nend\n"
            "redis.register_function('%s', function(keys, args)\n  KEYS, ARGV = keys, args\n"
            "  local reply = run()\n  KEYS, ARGV = nil, nil\n  return reply\nend)\n") % (
        name, text[:at], text[at:], name)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def unescape(s):
    """A MONITOR argument (sdscatrepr's quoting) back to its bytes."""
    out, i = bytearray(), 0
    simple = {"n": 10, "r": 13, "t": 9, "a": 7, "b": 8, '"': 34, "\\": 92}
    while i < len(s):
        if s[i] == "\\":
            if s[i + 1] == "x":
                out.append(int(s[i + 2:i + 4], 16))
                i += 4
            else:
                out.append(simple[s[i + 1]])
                i += 2
        else:
            out.extend(s[i].encode())
            i += 1
    return bytes(out)


def monitor_args(line):
    """The arguments of one MONITOR line, or []."""
    if "] " not in line:
        return []
    rest, args, i = line.split("] ", 1)[1], [], 0
    while True:
        start = rest.find('"', i)
        if start < 0:
            return args
        j = start + 1
        while j < len(rest) and rest[j] != '"':
            j += 2 if rest[j] == "\\" else 1
        # a line cut short (the monitor stopped while writing it)
        if j >= len(rest):
            return args
        args.append(unescape(rest[start + 1:j]))
        i = j + 1


def capture(bench, redis_server):
    """The fetch and settle scripts `bench` loads: (fetch.lua, complete.lua) texts."""
    cli = os.path.join(os.path.dirname(redis_server), "redis-cli")
    if not os.path.exists(cli):
        cli = shutil.which("redis-cli")
    port = free_port()
    srv = subprocess.Popen([redis_server, "--port", str(port), "--save", "", "--appendonly", "no"],
                           stdout=subprocess.DEVNULL)
    time.sleep(0.5)
    with tempfile.TemporaryFile("w+") as log:
        mon = subprocess.Popen([cli, "-p", str(port), "monitor"], stdout=log)
        time.sleep(0.3)
        env = dict(os.environ, REDIS_URL="redis://127.0.0.1:%d" % port)
        subprocess.run([bench, "--phase", "1", "--n", "2000", "--runs", "1"], env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        mon.terminate()
        srv.terminate()
        srv.wait()
        log.seek(0)
        found = {}
        for line in log:
            args = monitor_args(line)
            if len(args) > 2 and args[0].upper() == b"SCRIPT" and args[1].upper() == b"LOAD":
                text = args[2].decode()
                if "-- Leases up to n due jobs" in text:
                    found["fetch"] = text
                elif "-- Settles finished deliveries" in text:
                    found["complete"] = text
    if len(found) != 2:
        sys.exit("no fetch and settle scripts seen from %s" % bench)
    return found["fetch"], found["complete"]


class Server:
    """A redis-server on a free port, under callgrind when asked."""

    def __init__(self, redis_server, callgrind):
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="script-cost-")
        cmd = [redis_server, "--port", str(self.port), "--save", "", "--appendonly", "no"]
        if callgrind:
            cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=%s/out.%%p" % self.dir] + cmd
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.callgrind = callgrind
        for _ in range(300):
            try:
                self.r = Resp(port=self.port, timeout=120)
                break
            except OSError:
                time.sleep(0.1)
        else:
            sys.exit("redis-server did not start")

    def mark(self):
        """Redis's work since the last mark: µs of CPU, or instructions."""
        if self.callgrind:
            subprocess.run(["callgrind_control", "-d", str(self.proc.pid)], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, check=True)
            newest = max(glob.glob(self.dir + "/out.*"), key=os.path.getmtime)
            with open(newest) as f:
                for line in f:
                    if line.startswith(("summary:", "totals:")):
                        return int(line.split()[1])
            sys.exit("no totals in " + newest)
        cpu = self.r.info("cpu")
        now = (float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])) * 1e6
        was, self.cpu = getattr(self, "cpu", now), now
        return now - was

    def script_usec(self):
        """Redis's time inside script calls so far (µs, `INFO commandstats`)."""
        stats = self.r.info("commandstats")
        total = 0.0
        for cmd in ("cmdstat_evalsha", "cmdstat_fcall"):
            v = stats.get(cmd)
            total += float(v.split("usec=")[1].split(",")[0]) if v else 0.0
        return total

    def pipeline(self, cmds):
        self.r.sock.sendall(b"".join(Resp._encode(c) for c in cmds))
        return [self.r._read() for _ in cmds]

    def close(self):
        try:
            self.r.cmd("SHUTDOWN", "NOSAVE")
        except (ConnectionError, OSError):
            pass
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


SEEN = False


def fill(s, n, history):
    s.r.cmd("DEL", Q, Q + ":Q")
    for k, v in [("vt", "30"), ("delay", "0"), ("maxsize", "65536"), ("created", "1"), ("modified", "1")]:
        s.r.cmd("HSETNX", Q + ":Q", k, v)
    # "redjob:waiting" as redjob's create writes it (a queue without it is one
    # an RSMQ client made, which a fetch first has adopt.lua look over)
    s.r.cmd("HSET", Q + ":Q", "redjob:history", HISTORY[history], "totalsent", n, "redjob:waiting", "-")
    if SEEN:
        # a queue that has seen a retry's error and a throttle or a recorded
        # release: acks at delivery 1 look for earlier records
        s.r.cmd("HSET", Q + ":Q", "redjob:errors", "1", "redjob:throttles", "1")
    now = int(time.time() * 1000) - 1000
    for start in range(0, n, 1000):
        cmds = []
        for i in range(start, min(n, start + 1000)):
            jid = "hoozkv" + "".join(random.choices(ALPHABET, k=26))
            cmds.append(["ZADD", Q, now, jid])
            cmds.append(["HSET", Q + ":Q", jid, '{"type":"bench","args":{"i":%d}}' % i])
        s.pipeline(cmds)


def drain(s, fetch, complete, batch, history, convention, split=None):
    """Drains the queue by fetch + ack; Redis's work per job. `convention`:
    the scripts' calling convention, "bd4be8e", "floor" or None (this code's).
    With `split` (a dict), each call's time inside Redis (`INFO
    commandstats`) is added to split["fetch"] or split["settle"]."""

    def call(which, *args):
        if split is None:
            return s.r.cmd(*args)
        before = s.script_usec()
        reply = s.r.cmd(*args)
        split[which] = split.get(which, 0.0) + s.script_usec() - before
        return reply

    s.mark()
    done = 0
    keys = [Q, Q + ":Q", Q + ":history:ids", Q + ":history:Q"]
    # this code's scripts as functions: called by FCALL, otherwise the same
    ev = "FCALL" if convention == "function" else "EVALSHA"
    if convention == "function":
        convention = None
    while True:
        if convention == "floor":
            got = call("fetch", "EVALSHA", fetch, 2, Q, Q + ":Q", batch, MIN_TOKEN, int(time.time() * 1000))
            if not got:
                break
            argv = [int(time.time() * 1000), "1" if history == "on" else "0"]
            for jid in got[0::2]:
                argv += [jid, MIN_TOKEN]
            acked = call("settle", "EVALSHA", complete, 4, *keys, *argv)
            if acked * 2 != len(got):
                sys.exit("an ack failed its fence")
            done += acked
            continue
        if convention == "bd4be8e":
            out = call("fetch", "EVALSHA", fetch, 2, Q, Q + ":Q", batch, 30000, "")
            lease, rest = int(out[2]) + LEGACY, out[5:]
        else:
            out = call("fetch", ev, fetch, len(FETCH_KEYS), *FETCH_KEYS, batch, 30000, "")
            lease, rest = int(out[2]), out[6:]
        jobs, j = [], 0
        if convention == "bd4be8e":
            while j < len(rest):
                meta = int(rest[j + 2])
                jobs.append((rest[j], abs(meta) % 1000, rest[j + 1]))
                j += 4 if meta < 0 else 3
        else:
            # groups: meta (then its lease end when negative), n, n x (id, body)
            while j < len(rest):
                meta = int(rest[j])
                j += 2 if meta < 0 else 1
                n = int(rest[j])
                jobs += [(rest[j + 1 + 2 * q], abs(meta) % 1000, rest[j + 2 + 2 * q]) for q in range(n)]
                j += 1 + 2 * n
        if not jobs:
            break
        if convention == "bd4be8e":
            argv = [len(jobs), 0, 0, 0, 10000, 2592000000, "rsmq:rt:bench"]
            for jid, count, _ in jobs:
                argv += [jid, "%d.%03d" % (lease, count)]
            reply = call("settle", "EVALSHA", complete, 6, *COMPLETE_KEYS[:6], *argv)
        else:
            now = int(time.time() * 1000)
            span = ',"start":%d,"end":%d' % (now, now)
            argv = ["%d%s" % (len(jobs), "b" if history == "on" else ""), 0, 0, 0, 10000, 2592000000, "rsmq:rt:bench",
                    WORKER, HISTORY[history], 1, "bench"]
            # the acks in runs of one token, each with its span and, while
            # the history keeps bodies, its body as delivered, as a worker's
            # settle sends them
            runs = []
            for jid, count, body in jobs:
                token = "%d.%03d" % (lease, 500 + count)
                if not runs or runs[-1][0] != token:
                    runs.append((token, []))
                runs[-1][1].append([jid, span] + ([body] if history == "on" else []))
            argv.append(len(runs))
            for token, acks in runs:
                argv += [token, len(acks)]
                for a in acks:
                    argv += a
            argv += [1, 32, len(jobs), " ".join(["32"] * len(jobs))]
            reply = call("settle", ev, complete, len(COMPLETE_KEYS), *COMPLETE_KEYS, *argv)
        if int(reply[0]) != len(jobs):
            sys.exit("an ack failed its fence: %r" % reply[:4])
        done += len(jobs)
    return s.mark() / max(done, 1), done


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", default="target/release/examples/bench")
    ap.add_argument("--baseline", help="an older bench binary (bd4be8e's calling convention)")
    ap.add_argument("--n", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--callgrind", action="store_true")
    ap.add_argument("--functions", action="store_true",
                    help="also this code's scripts loaded as Redis functions (FCALL), beside the scripts")
    ap.add_argument("--split", action="store_true",
                    help="each script's time inside Redis per job, at fetches of 32 and 256, and the fixed "
                         "part of a call that the two sizes imply (history on)")
    ap.add_argument("--seen", action="store_true",
                    help="the queue has seen a retry's error and a throttle or a recorded release "
                         "(hash fields redjob:errors and redjob:throttles): acks look for earlier records")
    a = ap.parse_args()
    global SEEN
    SEEN = a.seen
    if a.split and a.callgrind:
        sys.exit("--split measures time: not with --callgrind")
    n = a.n or (3000 if a.callgrind else 50000)
    rounds = a.rounds or (1 if a.callgrind else 5)
    redis_server = shutil.which("redis-server") or sys.exit("redis-server on PATH")
    variants = []
    fetch, complete = capture(a.bench, redis_server)
    variants.append(("this code", fetch, complete, 256, None))
    if a.functions:
        variants.append(("this code as functions", as_library("sc_fetch", fetch, "-- Leases up to n due jobs"),
                         as_library("sc_complete", complete, "-- Settles finished deliveries"), 256, "function"))
    variants.append(("minimal scripts", floor_script("FETCH"), floor_script("ACK"), 256, "floor"))
    if a.baseline:
        fetch, complete = capture(a.baseline, redis_server)
        variants.append(("baseline, fetch of 32", fetch, complete, 32, "bd4be8e"))
    s = Server(redis_server, a.callgrind)
    try:
        shas = [(name, *([s.r.cmd("FUNCTION", "LOAD", "REPLACE", t) for t in (f, c)]
                         if conv == "function" else [s.r.cmd("SCRIPT", "LOAD", t) for t in (f, c)]), b, conv)
                for name, f, c, b, conv in variants]
        # warm up: the history at its count limit
        fill(s, max(n, 2000), "on")
        drain(s, *shas[0][1:4], "on", None)
        if a.split:
            split_report(s, shas, n, rounds)
            return
        results = {}
        for _ in range(rounds):
            for name, f, c, b, conv in shas:
                for history in (["on"] if conv == "bd4be8e" else ["on", "off"]):
                    fill(s, n, history)
                    per_job, done = drain(s, f, c, b, history, conv)
                    if done != n:
                        sys.exit("%s drained %d of %d" % (name, done, n))
                    results.setdefault((name, history), []).append(per_job)
    finally:
        s.close()
    unit = "instructions" if a.callgrind else "CPU µs"
    print("Redis's %s per job, n = %d, %d round(s): median (min-max)" % (unit, n, rounds))
    for (name, history), v in results.items():
        label = name if name.startswith("baseline") else "%s, history %s" % (name, history)
        fmt = "%.0f" if a.callgrind else "%.3f"
        print(("  %-36s " + fmt + " (" + fmt + "-" + fmt + ")") % (label, statistics.median(v), min(v), max(v)))


def split_report(s, shas, n, rounds):
    """--split: per script and fetch size, Redis's time per job (medians of
    `rounds`), then per call = fixed + per job x size, fitted to the two sizes."""
    sizes = (32, 256)
    got = {}
    for _ in range(rounds):
        for name, f, c, _, conv in shas:
            if conv == "bd4be8e":
                continue
            for size in sizes:
                fill(s, n, "on")
                split = {}
                _, done = drain(s, f, c, size, "on", conv, split)
                for which, us in split.items():
                    got.setdefault((name, which, size), []).append(us / done)
    print("Redis's time inside each script (INFO commandstats), history on, n = %d, %d round(s)" % (n, rounds))
    print("  %-16s %-7s %14s %14s %16s %14s" % ("scripts", "script", "µs/job at 32", "µs/job at 256",
                                                 "fixed µs/call", "µs/job beyond"))
    for name in dict.fromkeys(k[0] for k in got):
        for which in ("fetch", "settle"):
            a, b = (statistics.median(got[(name, which, size)]) for size in sizes)
            # a = v + F/32, b = v + F/256
            fixed = (a - b) / (1 / sizes[0] - 1 / sizes[1])
            print("  %-16s %-7s %14.3f %14.3f %16.1f %14.3f" % (name, which, a, b, fixed, b - fixed / sizes[1]))


if __name__ == "__main__":
    main()
