"""The in-pod server (``sandboxd`` of the runner image) in a real, hardened ``--network none``
container, on runc and gVisor, driven with the ``k8s-agent-sandbox`` SDK's own files client
and gRPC stub -- and with raw requests the SDK refuses to send, as an attacker (or a command
that planted links, FIFOs and floods in its workspace) would."""

from __future__ import annotations

import contextlib
import io
import socket
import time
from collections.abc import Iterator

import grpc
import pytest
import requests
from k8s_agent_sandbox.commands._process_stubs import process_pb2 as pb
from k8s_agent_sandbox.exceptions import SandboxRequestError

from ..conftest import require_runtime
from ..sandboxd_pod import Pod, feed, run, start_pod

MAX_PUT = 8 << 20
IO_TIMEOUT = 2.0
ARGS = ("--container", "--max-put-bytes", str(MAX_PUT), "--io-timeout", str(IO_TIMEOUT), "--max-list-entries", "1000")


@pytest.fixture(scope="module", params=["runc", "runsc"])
def pod(request: pytest.FixtureRequest) -> Iterator[Pod]:
    require_runtime("docker-runsc" if request.param == "runsc" else "docker")
    with start_pod(oci_runtime="runsc" if request.param == "runsc" else None, args=ARGS) as started:
        yield started
        print(started.logs())  # shown when a test failed


@pytest.fixture(autouse=True)
def _clean_workspace(pod: Pod) -> Iterator[None]:
    yield
    requests.delete(pod.base + "?recursive=true", timeout=30)


def sleeps(pod: Pod) -> int:
    code, out, err = pod.sh("cat /proc/[0-9]*/comm 2>/dev/null | grep -c '^sleep$' || true")  # no ps in the image
    assert code == 0, err
    return int(out.strip() or b"0")


def eventually_no_sleep(pod: Pod, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while sleeps(pod):
        assert time.monotonic() < deadline, "a process of the group outlived its stream"
        time.sleep(0.1)


# -- files -----------------------------------------------------------------------------------


def test_put_list_get_delete_round_trip_with_the_sdk(pod: Pod) -> None:
    data = bytes(range(256)) * 4096  # 1 MiB
    pod.files.write("run/in/data.bin", data)
    pod.files.write("run/in/streamed.bin", io.BytesIO(data))  # the SDK streams a file object (chunked)
    pod.connector.send_request("PUT", "v1/files/run%2Fin%2Ftool.sh?mode=0755", data=b"#!/bin/sh\n")
    entries = {e.name: e for e in pod.files.list("run/in")}
    assert set(entries) == {"data.bin", "streamed.bin", "tool.sh"}
    assert entries["data.bin"].size == len(data) and entries["data.bin"].type == "file"
    assert entries["tool.sh"].mode == "0755" and entries["data.bin"].mode == "0644"
    assert [e.type for e in pod.files.list("run")] == ["directory"]
    assert pod.files.read("run/in/data.bin") == data == pod.files.read("run/in/streamed.bin")
    assert pod.files.exists("run/in/tool.sh") and not pod.files.exists("run/in/nothing")
    # (no `ls`/`stat`/`test -x` here: this gVisor answers coreutils' statx with EINVAL)
    mode = "python3 -c \"import os; print(oct(os.stat('run/in/tool.sh').st_mode & 0o777))\""
    assert pod.sh(f"{mode} && cat run/in/tool.sh")[1] == b"0o755\n#!/bin/sh\n"
    pod.files.delete("run", recursive=True)
    assert not pod.files.exists("run")
    with pytest.raises(SandboxRequestError) as missing:
        pod.files.read("run/in/data.bin")
    assert missing.value.status_code == 404


def test_sandboxd_shapes_and_codes(pod: Pod) -> None:
    assert requests.get(pod.base.replace("files/", "health"), timeout=10).json()["status"] == "ok"
    answer = requests.put(pod.base + "x?mode=4755", data=b"x", timeout=10)  # set-id: refused
    assert (answer.status_code, answer.json()["code"]) == (400, "INVALID_ARGUMENT")
    requests.put(pod.base + "d%2Ff", data=b"x", timeout=10).raise_for_status()
    assert requests.put(pod.base + "d", data=b"x", timeout=10).status_code == 400  # a directory
    assert requests.put(pod.base + "d%2Ff%2Fg", data=b"x", timeout=10).status_code == 409  # parent is a file
    assert requests.delete(pod.base + "d", timeout=10).status_code == 409  # not empty
    assert requests.delete(pod.base + "d?recursive=maybe", timeout=10).status_code == 400
    assert requests.delete(pod.base, timeout=10).status_code == 409  # the root, not recursive
    assert requests.delete(pod.base + "?recursive=true", timeout=10).status_code == 204
    assert requests.get(pod.base, timeout=10).json() == {"path": "/", "entries": []}


@pytest.mark.parametrize(
    "raw",
    ["..%2F..%2Fetc%2Fpasswd", "%2E%2E/etc/passwd", "%2E%2E%2Fetc%2Fpasswd", "a/%2E%2E/%2E%2E/etc/passwd", "a%00b"],
)
def test_traversal_and_nul_are_refused(pod: Pod, raw: str) -> None:
    for method in ("GET", "PUT", "DELETE"):
        answer = requests.request(method, pod.base + raw, data=b"x" if method == "PUT" else None, timeout=10)
        assert answer.status_code == 403 and b"root:" not in answer.content, (method, answer.text)
        assert answer.json()["code"] == "PERMISSION_DENIED"


def test_absolute_and_double_encoded_paths_stay_below_the_root(pod: Pod) -> None:
    assert requests.get(pod.base + "%2Fetc%2Fpasswd", timeout=10).status_code == 404
    assert requests.get(pod.base + "%252E%252E%252Fetc%252Fpasswd", timeout=10).status_code == 404  # one decode
    requests.put(pod.base + "%2Fworkspace%2Fabs.txt", data=b"abs", timeout=10).raise_for_status()
    assert pod.files.read("abs.txt") == b"abs"


def test_links_planted_by_the_command_are_never_followed(pod: Pod) -> None:
    code, _, err = pod.sh(
        "mkdir -p out/real && echo secret > out/real/s && ln -s /etc out/etc && ln -s /etc/hostname out/host"
        " && ln -s real out/inside && ln -s /tmp out/tmp"
    )
    assert code == 0, err
    for path in ("out%2Fetc%2Fhostname", "out%2Fhost", "out%2Finside%2Fs", "out%2Finside", "out%2Fetc"):
        answer = requests.get(pod.base + path, timeout=10)
        assert answer.status_code == 403, (path, answer.status_code, answer.text)
    # A PUT through a linked directory (outside or inside the root) writes nowhere.
    assert requests.put(pod.base + "out%2Ftmp%2Fplanted", data=b"x", timeout=10).status_code == 403
    assert requests.put(pod.base + "out%2Finside%2Fplanted", data=b"x", timeout=10).status_code == 403
    assert pod.sh("test -e /tmp/planted || test -e out/real/planted || echo none")[1] == b"none\n"
    # A PUT onto a link replaces the link, not its target.
    assert requests.put(pod.base + "out%2Fhost", data=b"replaced", timeout=10).status_code == 204
    assert pod.sh("cat /etc/hostname; test -L out/host || echo notalink")[1].endswith(b"notalink\n")
    assert b"replaced" not in pod.sh("cat /etc/hostname")[1]
    # Listings leave links out; DELETE of a link removes the link only.
    assert sorted(e.name for e in pod.files.list("out")) == ["host", "real"]
    assert requests.delete(pod.base + "out%2Finside?recursive=true", timeout=10).status_code == 204
    assert pod.files.read("out/real/s") == b"secret\n"
    # A cwd through a link, or out of the root, is refused too.
    for cwd in ("out/etc", "../..", "out/tmp"):
        with pytest.raises(grpc.RpcError) as refused:
            run(pod.stub, ["true"], cwd=cwd)
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED, cwd
    assert run(pod.stub, ["pwd"], cwd="out/real")[1] == b"/workspace/out/real\n"


def test_a_fifo_or_socket_is_not_served(pod: Pod) -> None:
    assert (
        pod.sh(
            "mkdir -p out && mkfifo out/fifo && python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('out/sock')\""
        )[0]
        == 0
    )
    started = time.monotonic()
    for name in ("out%2Ffifo", "out%2Fsock"):
        answer = requests.get(pod.base + name, timeout=10)
        assert answer.status_code in (403, 404), answer.text  # never a read that blocks
    assert time.monotonic() - started < 5
    assert [e.name for e in pod.files.list("out")] == []


def test_oversized_bodies_are_refused_before_they_are_read(pod: Pod) -> None:
    with socket.create_connection(("127.0.0.1", pod.rest_port), timeout=10) as conn:
        conn.sendall(b"PUT /v1/files/big HTTP/1.1\r\nHost: x\r\nContent-Length: 2147483648\r\n\r\n")
        assert conn.recv(4096).startswith(b"HTTP/1.1 413 ")

    # A chunked body is capped as it arrives.
    def chunks() -> Iterator[bytes]:
        for _ in range(MAX_PUT // (1 << 20) + 2):
            yield b"z" * (1 << 20)

    with contextlib.suppress(requests.ConnectionError):
        answer = requests.put(pod.base + "big", data=chunks(), timeout=30)
        assert answer.status_code == 413 and answer.json()["code"] == "RESOURCE_EXHAUSTED"
    assert not pod.files.exists("big")
    assert [e.name for e in pod.files.list("")] == []  # no temporary file left behind


def test_a_stalled_writer_or_reader_is_dropped_and_others_are_served(pod: Pod) -> None:
    pod.files.write("big.bin", b"b" * (MAX_PUT - 1))
    with (
        socket.create_connection(("127.0.0.1", pod.rest_port), timeout=30) as writer,
        socket.create_connection(("127.0.0.1", pod.rest_port), timeout=30) as reader,
    ):
        writer.sendall(b"PUT /v1/files/half HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n" + b"h" * 10)
        reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        reader.sendall(b"GET /v1/files/big.bin HTTP/1.1\r\nHost: x\r\n\r\n")
        reader.recv(100)  # then it stops reading
        assert pod.files.read("big.bin")[:3] == b"bbb"  # the server answers others meanwhile
        started = time.monotonic()
        assert writer.recv(4096) == b""  # closed by the server after --io-timeout
        assert time.monotonic() - started < IO_TIMEOUT + 20
    assert not pod.files.exists("half")
    assert sorted(e.name for e in pod.files.list("")) == ["big.bin"]  # no temporary file left


def test_a_huge_listing_is_refused_not_truncated(pod: Pod) -> None:
    assert pod.sh("mkdir many && cd many && seq 1001 | xargs touch")[0] == 0
    answer = requests.get(pod.base + "many", timeout=30)
    assert (answer.status_code, answer.json()["code"]) == (413, "RESOURCE_EXHAUSTED")
    assert pod.sh("rm many/1")[0] == 0
    assert len(pod.files.list("many")) == 1000


def test_deep_trees_are_deleted(pod: Pod) -> None:
    assert pod.sh("p=deep; for i in $(seq 1500); do p=$p/d; done; mkdir -p $p && touch $p/f")[0] == 0
    pod.files.delete("deep", recursive=True)
    assert not pod.files.exists("deep")


# -- processes -------------------------------------------------------------------------------


def test_exit_codes_signals_and_streams(pod: Pod) -> None:
    assert pod.sh("echo out; echo err >&2; exit 7") == (7, b"out\n", b"err\n")
    assert pod.sh("kill -9 $$")[0] == 137  # 128 + n, as the other runtimes report it
    code, _, err = run(pod.stub, ["/no/such/program"])
    assert code == 127 and b"cannot run" in err  # through the launcher
    assert run(pod.stub, ["env"], env_vars={"RUN_VAR": "x"})[1].count(b"RUN_VAR=x") == 1


def test_stdin_large_and_none(pod: Pod) -> None:
    data = bytes(range(256)) * 20000  # 5 MB
    assert pod.sh("cat", stdin=data, timeout=60)[1] == data
    started = time.monotonic()
    assert pod.sh("read x; echo got:$x", stdin=b"") == (0, b"got:\n", b"")  # EOF, not a hang
    assert time.monotonic() - started < 20


def test_the_deadline_keeps_partial_output_and_kills_the_group(pod: Pod) -> None:
    stream = pod.stub.Start(
        pb.StartRequest(config=pb.ProcessConfig(command=["bash", "-c", "echo partial; sleep 30 & exec sleep 30"])),
        timeout=60,
    )
    events = iter(stream)
    process_id = next(events).init.process_id
    first = next(events)
    assert first.stdout == b"partial\n"
    pod.stub.SendSignal(
        pb.SendSignalRequest(process_id=process_id, signal=pb.SIGNAL_SIGKILL), timeout=10
    )  # the worker's deadline
    rest = list(events)
    assert rest[-1].exit.exit_code == 137
    eventually_no_sleep(pod, 5)


def test_a_grpc_deadline_ends_the_group_with_the_stream(pod: Pod) -> None:
    out = bytearray()
    stream = pod.stub.Start(
        pb.StartRequest(config=pb.ProcessConfig(command=["bash", "-c", "echo partial; sleep 40 & sleep 40"])), timeout=2
    )
    with pytest.raises(grpc.RpcError) as ended:
        for event in stream:
            out += event.stdout
    assert ended.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED and out == b"partial\n"
    eventually_no_sleep(pod)


def test_a_cancelled_stream_kills_the_group(pod: Pod) -> None:
    stream = pod.stub.Start(
        pb.StartRequest(config=pb.ProcessConfig(command=["bash", "-c", "sleep 40 & sleep 40"])), timeout=60
    )
    next(stream)
    deadline = time.monotonic() + 10
    while sleeps(pod) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    stream.cancel()
    eventually_no_sleep(pod)


#: Starts ``sleep N`` in a session of its own and returns once it runs (no race with the exit).
LEFTOVER = (
    "python3 -c \"import subprocess, sys; keep = '--keep-stdout' in sys.argv;"
    " subprocess.Popen(['sleep', sys.argv[1]], start_new_session=True,"
    ' stdout=None if keep else subprocess.DEVNULL, stderr=subprocess.DEVNULL)"'
)


def test_leftovers_in_their_own_session_are_killed_at_exit(pod: Pod) -> None:
    started = time.monotonic()
    assert pod.sh(f"{LEFTOVER} 60 && {LEFTOVER} 61 --keep-stdout && echo started")[1] == b"started\n"
    assert time.monotonic() - started < 15  # the leftover holding stdout does not hold the stream
    assert sleeps(pod) == 0  # --container: kill(-1) before the exit event


def test_leftovers_are_swept_when_the_last_process_exits(pod: Pod) -> None:
    stream = pod.stub.Start(pb.StartRequest(config=pb.ProcessConfig(command=["sleep", "30"])), timeout=60)
    next(stream)
    assert pod.sh(f"{LEFTOVER} 62")[0] == 0
    assert sleeps(pod) == 2  # another process runs: no kill(-1) under it
    stream.cancel()
    assert pod.sh("true")[0] == 0  # the last process: the sweep takes the leftover
    eventually_no_sleep(pod)


def test_output_is_streamed_in_chunks_with_back_pressure(pod: Pod) -> None:
    size = 64 << 20
    total, largest = 0, 0
    for event in pod.stub.Start(
        pb.StartRequest(config=pb.ProcessConfig(command=["head", "-c", str(size), "/dev/zero"])), timeout=120
    ):
        if event.WhichOneof("event") == "stdout":
            total += len(event.stdout)
            largest = max(largest, len(event.stdout))
    assert total == size and largest <= 64 * 1024
    # A client that stops reading (its cap reached) holds the process on its pipe.
    # (1 MiB at a time: a 256 MiB buffer in the child, and gVisor's copy of it, would crowd the pod)
    script = "python3 -c 'import sys\nfor _ in range(256): sys.stdout.buffer.write(b\"x\" * (1 << 20))'; touch done"
    stream = pod.stub.Start(pb.StartRequest(config=pb.ProcessConfig(command=["bash", "-c", script])), timeout=120)
    next(stream), next(stream)
    time.sleep(3)
    assert not pod.files.exists("done")
    stream.cancel()
    eventually_no_sleep(pod)
    assert not pod.files.exists("done")


PROBE = r"""
import ctypes, os, socket, subprocess
libc = ctypes.CDLL(None, use_errno=True)
child = subprocess.Popen(["sleep", "30"])
print("attach-child", libc.ptrace(16, child.pid, None, None), ctypes.get_errno())
child.kill()
try:
    socket.socket(40, socket.SOCK_STREAM); print("vsock open")
except OSError as exc:
    print("vsock", exc.errno)
servers = [p for p in os.listdir("/proc") if p.isdigit()
           and open(f"/proc/{p}/cmdline", "rb").read().startswith(b"/usr/bin/python3\0-I\0-c\0")]
print("servers", len(servers))
for pid in servers:
    print("attach-server", libc.ptrace(16, int(pid), None, None), ctypes.get_errno())
    for what in ("mem", "environ"):
        try:
            open(f"/proc/{pid}/{what}", "rb").read(1); print(what, "readable")
        except OSError as exc:
            print(what, exc.errno)
"""


def test_the_seccomp_filter_applies_and_the_server_is_out_of_reach(pod: Pod, request: pytest.FixtureRequest) -> None:
    code, out, err = pod.sh(f"python3 - <<'EOF'\n{PROBE}\nEOF")
    assert code == 0, err
    seen = dict(line.split(" ", 1) for line in out.decode().splitlines())
    assert seen["attach-child"] == "-1 1" and seen["vsock"] == "1", seen  # the launcher's filter
    assert seen["servers"] == "1" and seen["attach-server"] == "-1 1", seen
    assert seen["mem"] in ("1", "13"), seen  # non-dumpable
    if request.node.callspec.params["pod"] == "runc":  # gVisor honours it for ptrace and mem only
        assert seen["environ"] in ("1", "13"), seen


def test_unknown_processes_and_signals(pod: Pod) -> None:
    for call in (
        lambda: pod.stub.SendSignal(pb.SendSignalRequest(process_id=999, signal=pb.SIGNAL_SIGKILL), timeout=10),
        lambda: (
            feed(pod.stub, 999, b"x")
            or pod.stub.WriteStdin(pb.WriteStdinRequest(process_id=999, input=b"x"), timeout=10)
        ),
    ):
        with pytest.raises(grpc.RpcError) as missing:
            call()
        assert missing.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.RpcError) as empty:
        run(pod.stub, [])
    assert empty.value.code() == grpc.StatusCode.INVALID_ARGUMENT
