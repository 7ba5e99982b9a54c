"""Unpack an untrusted ``.zip`` or ``.tar[.gz|.bz2|.xz]`` into a folder, with bounded work.

Nothing an archive declares is trusted, and every cap applies while bytes are
produced, never after:

* sizes are counted as they are read: a member stops at ``max_file_bytes``, all
  members together at ``max_total_bytes`` (declared sizes over a cap are refused up
  front, as a cheap early answer; a header that claims less than it holds is caught
  by the reader, which stops at the claim and then fails the CRC);
* every byte a decompressor produces counts -- headers, padding, data between or after
  members -- against one budget: ``max_total_bytes`` plus room for headers, and at
  most ``ratio_floor_bytes`` plus ``max_ratio`` times the upload.  That bounds the CPU
  of any stream linearly: a 79-byte ``.tar.bz2`` that inflates to a GiB is refused
  after about ``ratio_floor_bytes``;
* tar is read by a small streaming reader of our own (ustar, GNU long names, pax
  ``path``/``size``), in one pass: the standard ``tarfile`` seeks over members by
  decompressing them, reads pax headers whole and parses them with regular
  expressions that take quadratic time on crafted input;
* zip entries may only be stored or deflated (zip's bzip2 and lzma readers inflate a
  whole input block at once, unbounded), and the central directory is sized before
  :mod:`zipfile` reads it;
* no links, devices, FIFOs or sparse files; no absolute or ``..`` paths, names that
  are not UTF-8, or paths over :data:`.unpacking.MAX_ENTRY_PATH_BYTES`; at most ``max_entries``.

The caps and the writer are :mod:`.unpacking`'s, the readers :mod:`.tarreader` and
:mod:`.zipreader`; this module picks the reader.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from .tarreader import untar
from .unpacking import PackageLimits, Tally, Writer
from .zipreader import unzip


def unpack(data: bytes, dest: Path, limits: PackageLimits) -> list[PurePosixPath]:
    """Write the archive's folders and files under ``dest`` (which must exist).

    Returns the files' paths, in archive order.  Raises :class:`~.unpacking.PackageError`
    (400) for a broken or unsafe archive, ``TooLarge`` (413, ``package_too_large``)
    for one over a cap; an ``OSError`` only from writing under ``dest``.
    """
    tally = Tally(limits, len(data))
    out = Writer(dest, tally)
    if data[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
        unzip(data, out, tally)
    else:
        untar(data, out, tally)
    return out.files
