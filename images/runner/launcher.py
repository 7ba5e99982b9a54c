"""The warm-pool launcher: runs exactly one command in its (single-use) container.

Started as the container's main process (under tini), with the same user and
restrictions as the command.  It listens on a Unix socket inside the run's own
workspace mount, accepts exactly one connection, then removes the socket so nothing
else can reach it.

Protocol (host -> launcher): one JSON line
    {"command": str, "cwd": str, "env": {str: str}, "stdin": path-or-null}
(launcher -> host): frames of 1 byte kind + 4 bytes big-endian length + payload:
    b"O" stdout bytes, b"E" stderr bytes, b"X" a JSON {"exit_code", "signal"} (last).

When the command's main process exits, whatever it left behind is killed
(``kill(-1, SIGKILL)``: every process of the container but PID 1 and this one), so the
workspace is final when the exit frame arrives -- as in a container per run, where the
container ends with its main process.  The host still kills and removes the container.
"""

import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys


def frame(conn, kind, payload):
    conn.sendall(kind + struct.pack(">I", len(payload)) + payload)


def read_request(conn):
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            raise SystemExit(0)
        data += chunk
    return json.loads(data)


def run(conn, request):
    stdin_path = request.get("stdin")
    stdin = open(stdin_path, "rb") if stdin_path else subprocess.DEVNULL
    proc = subprocess.Popen(
        ["bash", "-c", request["command"]],
        cwd=request["cwd"],
        env={**os.environ, **request["env"]},  # the image's environment, as Docker gives a new container
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    if stdin_path:
        stdin.close()
    selector = selectors.DefaultSelector()
    for pipe, kind in ((proc.stdout, b"O"), (proc.stderr, b"E")):
        os.set_blocking(pipe.fileno(), False)
        selector.register(pipe, selectors.EVENT_READ, kind)
    # The main process's exit wakes the selector too (a pidfd), so it is seen at once
    # even while leftovers keep the pipes open.
    pidfd = os.pidfd_open(proc.pid) if hasattr(os, "pidfd_open") else None
    if pidfd is not None:
        selector.register(pidfd, selectors.EVENT_READ, b"P")
    open_pipes = 2
    exited = False
    while open_pipes:
        events = selector.select(timeout=0 if exited else (None if pidfd is not None else 0.005))
        for key, _ in events:
            if key.data == b"P":
                selector.unregister(pidfd)
                continue
            try:
                chunk = os.read(key.fileobj.fileno(), 65536)
            except BlockingIOError:
                continue
            if chunk:
                frame(conn, key.data, chunk)
            else:
                selector.unregister(key.fileobj)
                open_pipes -= 1
        if not exited and proc.poll() is not None:
            exited = True
            continue  # one more pass to drain what is already in the pipes
        if exited and not events:
            break  # the main process is gone; leftovers holding the pipes die below
    code = proc.wait()
    try:
        os.kill(-1, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    result = {"exit_code": code if code >= 0 else 128 - code, "signal": None}
    if code < 0:
        result["signal"] = signal.Signals(-code).name
    elif code > 128 and code - 128 < 65:
        try:
            result["signal"] = signal.Signals(code - 128).name
        except ValueError:
            pass
    frame(conn, b"X", json.dumps(result).encode())


def main():
    path = sys.argv[1]
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path + ".tmp")
    os.rename(path + ".tmp", path)  # appears only once it is ready to accept
    server.listen(1)
    conn, _ = server.accept()
    server.close()
    os.unlink(path)
    try:
        run(conn, read_request(conn))
    except (BrokenPipeError, ConnectionResetError):
        pass
    finally:
        conn.close()


if __name__ == "__main__":
    main()
