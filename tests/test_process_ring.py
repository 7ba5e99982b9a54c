"""A process's output ring and the text a poll answers (pure logic)."""

from __future__ import annotations

from skill_executor.runs.processes import OutputRing, _text


def test_the_ring_keeps_the_newest_bytes_and_counts_them_all() -> None:
    ring = OutputRing(8)
    ring.write(b"abcdef")
    assert ring.read(0, 100) == (0, b"abcdef", 0)
    ring.write(b"ghijkl")
    assert ring.total == 12 and ring.start == 4
    assert ring.read(0, 100) == (4, b"efghijkl", 4)  # 4 bytes past `after` were dropped
    assert ring.read(6, 3) == (6, b"ghi", 0)
    assert ring.read(12, 100) == (12, b"", 0)
    assert ring.read(99, 100) == (12, b"", 0)  # past the end: the end


def test_a_poll_cut_short_leaves_a_split_character_for_the_next() -> None:
    data = "aé".encode()  # b"a\xc3\xa9"
    assert _text(data[:2], cut=True) == ("a", 1)
    assert _text(data, cut=True) == ("aé", 3)
    assert _text(data[:2], cut=False) == ("a\ufffd", 2)
