"""Runs RSMQ calls with PyPI's RSMQ client (PyRSMQ) for redjob's interop tests.

Usage: python driver.py <port> <namespace> < ops.json
ops.json is an array of {"op": "<RSMQ method>", ...parameters}; the output is
one JSON array with each call's result, or {"error": "<name>: <message>"} where
it failed (receiveMessage on an empty queue: NoMessageInQueue).
"""
import json
import sys

from rsmq import RedisSMQ


def plain(value):
    """A result as JSON can hold it (PyRSMQ returns bytes from some calls)."""
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, dict):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [plain(v) for v in value]
    return value


def main():
    port, ns = sys.argv[1:3]
    rsmq = RedisSMQ(host="127.0.0.1", port=int(port), ns=ns)
    out = []
    for call in json.load(sys.stdin):
        op = call.pop("op")
        try:
            out.append(plain(getattr(rsmq, op)(**call).execute()))
        except Exception as e:  # each call's failure is its result
            out.append({"error": f"{type(e).__name__}: {e}"})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
