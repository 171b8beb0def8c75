"""Enqueues a redjob job from Python with PyPI's RSMQ client (PyRSMQ).

A redjob job is an RSMQ message whose body is the JSON envelope
{"type": "<job name>", "args": {...}}: a worker that has the job type
(#[derive(Job)] with #[job(name = "<job name>")]) runs it.

Usage: python enqueue_job.py <port> <queue> <job name> '<args as JSON>' [delay s]
Prints the message id.
"""
import json
import sys

from rsmq import RedisSMQ
from rsmq.cmd.exceptions import QueueAlreadyExists


def main():
    port, queue, job, args = sys.argv[1:5]
    delay = float(sys.argv[5]) if len(sys.argv) > 5 else 0
    rsmq = RedisSMQ(host="127.0.0.1", port=int(port), ns="rsmq")
    try:
        rsmq.createQueue(qname=queue).execute()
    except QueueAlreadyExists:
        pass
    envelope = json.dumps({"type": job, "args": json.loads(args)})
    print(rsmq.sendMessage(qname=queue, message=envelope, delay=delay).execute())


if __name__ == "__main__":
    main()
