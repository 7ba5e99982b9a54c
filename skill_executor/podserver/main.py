"""``sandboxd``: the in-pod server's command line (sandboxd's flags and defaults, plus ours).

    sandboxd [--listen-host 0.0.0.0] [--rest-port 8080] [--grpc-port 9090] [--root-dir /workspace]
             [--unix-dir DIR] [--launcher PATH | --launcher ''] [--container] [limits...]

``--unix-dir`` also listens on ``DIR/rest.sock`` and ``DIR/grpc.sock`` (a port of 0 turns that
TCP listener off): how a ``--network none`` container is reached through a bind mount.  One JSON
line on stdout says the server is ready; SIGTERM or SIGINT stops it, killing what still runs.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import socketserver
import sys
import threading
from concurrent import futures
from http.server import ThreadingHTTPServer
from typing import Any

import grpc

from . import process, rest, tree

PR_SET_DUMPABLE = 4
DEFAULT_LAUNCHER = "/opt/skill-executor/launcher"


class QuietErrors:
    """A dropped or stalled connection is the client's business: no traceback for it."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if not isinstance(exc, ConnectionError | TimeoutError):
            print(f"sandboxd: REST request failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)


class TCPFilesServer(QuietErrors, ThreadingHTTPServer):
    pass


class UnixFilesServer(QuietErrors, rest.UnixThreadingHTTPServer):
    pass


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="sandboxd", description="sandboxd's REST files API and gRPC ProcessService")
    ap.add_argument("--listen-host", default="0.0.0.0")
    ap.add_argument("--rest-port", type=int, default=8080, help="0: no TCP listener (see --unix-dir)")
    ap.add_argument("--grpc-port", type=int, default=9090, help="0: no TCP listener (see --unix-dir)")
    ap.add_argument("--root-dir", default="/workspace", help="what /v1/files serves, and the processes' cwd")
    ap.add_argument("--unix-dir", help="also listen on rest.sock and grpc.sock in this directory")
    ap.add_argument("--launcher", default=DEFAULT_LAUNCHER, help="children run as LAUNCHER --exec -- ARGV ('': none)")
    ap.add_argument("--container", action="store_true", help="single-use pod: after a process, kill(-1)")
    ap.add_argument("--max-put-bytes", type=int, default=1 << 30, help="largest PUT body (413 above)")
    ap.add_argument("--max-list-entries", type=int, default=10000, help="largest directory listing (413 above)")
    ap.add_argument("--max-execute-bytes", type=int, default=4 << 20, help="largest unary Execute output")
    ap.add_argument("--io-timeout", type=float, default=30.0, help="seconds a REST connection may stall")
    ap.add_argument("--drain-seconds", type=float, default=2.0, help="pipe drain after the main process exits")
    ap.add_argument("--max-rpcs", type=int, default=16, help="concurrent gRPC calls (RESOURCE_EXHAUSTED above)")
    args = ap.parse_args(argv)
    if args.rest_port and args.rest_port == args.grpc_port:
        ap.error("--rest-port and --grpc-port must differ")
    if not (args.rest_port or args.unix_dir) or not (args.grpc_port or args.unix_dir):
        ap.error("a port of 0 needs --unix-dir")
    if args.launcher and not os.access(args.launcher, os.X_OK):
        ap.error(f"--launcher {args.launcher} is not an executable ('' runs commands without it)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    # The command runs as this server's uid: it may not trace it or read its memory.
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        print("sandboxd: prctl(PR_SET_DUMPABLE, 0) failed", file=sys.stderr)
        return 1
    root = tree.PodRoot(args.root_dir)
    servicer = process.ProcessServicer(
        root,
        [args.launcher, "--exec", "--"] if args.launcher else [],
        container=args.container,
        drain=args.drain_seconds,
        max_execute=args.max_execute_bytes,
    )
    grpc_server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=args.max_rpcs), maximum_concurrent_rpcs=args.max_rpcs
    )
    process.pb_grpc.add_ProcessServiceServicer_to_server(servicer, grpc_server)
    limits = {"max_put": args.max_put_bytes, "max_entries": args.max_list_entries, "io_timeout": args.io_timeout}
    http: list[socketserver.BaseServer] = []
    grpc_addresses = [f"{args.listen_host}:{args.grpc_port}"] if args.grpc_port else []
    if args.rest_port:
        http.append(
            TCPFilesServer((args.listen_host, args.rest_port), rest.handler_class(rest.FilesHandler, root, **limits))
        )
    if args.unix_dir:
        rest_sock, grpc_sock = (os.path.join(args.unix_dir, name) for name in ("rest.sock", "grpc.sock"))
        for path in (rest_sock, grpc_sock):
            if os.path.lexists(path):
                os.unlink(path)
        grpc_addresses.append(f"unix:{grpc_sock}")
        http.append(UnixFilesServer(rest_sock, rest.handler_class(rest.UnixFilesHandler, root, **limits)))
    for address in grpc_addresses:
        if not grpc_server.add_insecure_port(address):
            print(f"sandboxd: cannot listen on {address}", file=sys.stderr)
            return 1
    grpc_server.start()
    for server in http:
        threading.Thread(target=server.serve_forever, daemon=True, name="rest").start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    if os.getpid() == 1:
        threading.Thread(target=servicer.reap_orphans, args=(stop,), daemon=True, name="reaper").start()
    ready = {"ready": True, "rest": args.rest_port, "grpc": args.grpc_port, "unix": args.unix_dir, "root": root.path}
    print(json.dumps(ready), flush=True)
    stop.wait()
    for server in http:
        server.shutdown()
    grpc_server.stop(2).wait()  # ends the streams: each kills its process group
    return 0
