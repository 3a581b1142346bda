"""``echo2 worker serve``: run a rollout worker outside the Ray cluster (see ``server``)."""

from __future__ import annotations

import argparse
import sys


def add_worker_parser(sub) -> None:
    worker = sub.add_parser("worker", help="run a rollout worker on a machine that does not join the Ray cluster")
    actions = worker.add_subparsers(dest="worker_command", metavar="ACTION", required=True)
    p = actions.add_parser(
        "serve", help="listen for the learner (list this machine as HOST:PORT in rollout.workers[].endpoint)",
        description="Serve one learner at a time on --listen. The learner and this machine share a token in "
                    "the environment variable named by --token-env (≥ 16 characters); both sides authenticate "
                    "before anything else. Results go back as JSON only; snapshots arrive as signed, hash-checked "
                    "safetensors chunks. The model named in the learner's config must load here (hub name or path).")
    p.add_argument("--listen", default="0.0.0.0:7100", metavar="HOST:PORT",
                   help="address to listen on (default 0.0.0.0:7100; port 0 picks a free one)")
    p.add_argument("--token-env", default="ECHO2_WORKER_TOKEN", metavar="VAR",
                   help="environment variable holding the shared token (default ECHO2_WORKER_TOKEN)")
    p.add_argument("--task", action="append", metavar="NAME",
                   help="only accept these tasks (repeatable; default: any registered task)")
    p.add_argument("--advertise-host", metavar="HOST",
                   help="address other workers dial for snapshot chunks (default: what the learner suggests)")
    p.add_argument("--broadcast-ports", metavar="FIRST-LAST",
                   help="port range of this worker's snapshot node, e.g. 7101-7101 (default: the learner's "
                        "broadcast.port_range, else an ephemeral port); open it to the other workers")
    p.add_argument("--once", action="store_true", help="exit after the first learner session ends")
    p.set_defaults(func=cmd_worker_serve)


def cmd_worker_serve(args: argparse.Namespace) -> int:
    from echo2_sdk.config import parse_endpoint
    from echo2_sdk.runtime.rollout.remote.protocol import ProtocolError, token_from_env
    from echo2_sdk.runtime.rollout.remote.server import serve_worker

    try:
        host, port = parse_endpoint(args.listen) if not args.listen.endswith(":0") else (args.listen[:-2], 0)
        token = token_from_env(args.token_env)
        ports = None
        if args.broadcast_ports:
            first, _, last = args.broadcast_ports.partition("-")
            if not (first.isdigit() and last.isdigit() and 0 < int(first) <= int(last) < 65536):
                raise ValueError(f"--broadcast-ports {args.broadcast_ports!r} must be FIRST-LAST, e.g. 7101-7101")
            ports = (int(first), int(last))
    except (ValueError, ProtocolError) as exc:
        print(f"echo2 worker serve: {exc}", file=sys.stderr)
        return 2
    serve_worker(host, port, token, allowed_tasks=set(args.task) if args.task else None, once=args.once,
                 log=lambda m: print(f"[echo2 worker] {m}", flush=True), advertise_host=args.advertise_host,
                 broadcast_ports=ports)
    return 0
