"""Bounded output capture and frame demultiplexing (pure logic)."""

from __future__ import annotations

import socket
import threading

import pytest

from skill_executor.runtimes.streams import BoundedBuffer, Demux, ProtocolError, recv_loop


def frame(kind: int, payload: bytes) -> bytes:
    return bytes([kind]) + len(payload).to_bytes(4, "big") + payload


def make(limit: int = 10, control_max: int = 4096):  # type: ignore[no-untyped-def]
    out, err = BoundedBuffer(limit), BoundedBuffer(limit)
    seen: list[tuple[str, bytes]] = []
    control: list[tuple[int, bytes]] = []
    demux = Demux(
        5,
        lambda h: (h[0], int.from_bytes(h[1:5], "big")),
        {1: ("stdout", out), 2: ("stderr", err)},
        lambda name, data: seen.append((name, data)),
        lambda s, p: control.append((s, p)),
        controls=frozenset({7, 9}),
        control_max=control_max,
    )
    return demux, out, err, seen, control


def test_frames_split_anywhere() -> None:
    stream = frame(1, b"hello ") + frame(2, b"oops") + frame(1, b"world") + frame(1, b"") + frame(9, b'{"exit": 0}')
    for step in (1, 2, 3, 7, len(stream)):
        demux, out, err, seen, control = make(limit=100)
        for i in range(0, len(stream), step):
            demux.feed(memoryview(stream[i : i + step]))
        assert out.data == b"hello world" and err.data == b"oops"
        assert b"".join(d for n, d in seen if n == "stdout") == b"hello world"
        assert control == [(9, b'{"exit": 0}')]


def test_caps_truncate_and_listener_sees_only_kept() -> None:
    demux, out, err, seen, _ = make(limit=8)
    demux.feed(memoryview(frame(1, b"0123456789abcdef") + frame(1, b"more")))
    assert out.data == b"01234567" and out.truncated and out.total == 20
    assert seen == [("stdout", b"01234567")]


def test_recv_loop_reads_to_eof() -> None:
    left, right = socket.socketpair()
    demux, out, _, _, control = make(limit=1 << 20)
    payload = bytes(range(256)) * 4000
    writer = threading.Thread(target=lambda: (right.sendall(frame(1, payload) + frame(7, b"x")), right.close()))
    writer.start()
    recv_loop(left, demux, size=4096)
    writer.join()
    left.close()
    assert out.data == payload and control == [(7, b"x")]


def test_an_output_frame_is_never_buffered_whole() -> None:
    """A frame declaring 4 GiB of stdout streams into the capped buffer, chunk by chunk."""
    demux, out, _, seen, _ = make(limit=100)
    demux.feed(memoryview(bytes([1]) + (4 * 1024**3 - 1).to_bytes(4, "big")))
    chunk = memoryview(b"y" * 65536)
    for _ in range(256):
        demux.feed(chunk)
    assert out.data == b"y" * 100 and out.truncated and out.total == 256 * 65536
    assert len(demux._frame) == 0 and seen == [("stdout", b"y" * 100)]


def test_unknown_kinds_and_oversized_control_frames_are_refused_at_their_header() -> None:
    demux, *_ = make()
    with pytest.raises(ProtocolError, match="unknown frame kind 8"):
        demux.feed(memoryview(bytes([8]) + (5).to_bytes(4, "big")))  # refused before its payload
    demux, *_ = make(control_max=16)
    with pytest.raises(ProtocolError, match="a control frame of 17 bytes"):
        demux.feed(memoryview(bytes([9]) + (17).to_bytes(4, "big")))
    demux, _, _, _, control = make(control_max=16)
    demux.feed(memoryview(frame(9, b"x" * 16)))
    assert control == [(9, b"x" * 16)]


def test_without_a_control_callback_other_streams_are_dropped_unbuffered() -> None:
    """Docker's attach stream (the per-run path) has no control frames: nothing unknown is kept."""
    out = BoundedBuffer(10)
    demux = Demux(5, lambda h: (h[0], int.from_bytes(h[1:5], "big")), {1: ("stdout", out)}, None)
    demux.feed(memoryview(bytes([3]) + (1 << 30).to_bytes(4, "big") + b"z" * 65536))
    assert len(demux._frame) == 0 and out.data == b""
