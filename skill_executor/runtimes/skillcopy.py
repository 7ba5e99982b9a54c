"""The run's private copy of its skill (``SKILL_DIR``), the same on every runtime and path.

Published skills assume their folder is a working directory: ``find scripts -name
'*.py'`` sees real files, ``cd out && python ../templates/x.py`` works (the skill's
top-level entries are linked into the workspace root too), and relative
writes from the skill root (``python scripts/office/unpack.py doc.docx unpacked/``)
succeed.  So every run gets its own copy of the skill, owned by the run's user:

* folders and small files are real copies the run may change, add to and delete;
* a file of :data:`LINK_MIN_BYTES` or more that the run's user cannot write (nor gain
  anything from: no set-id bit) is a hard link to the installed file instead -- no data
  moves, and it stays read-only: its inode is the installed skill's, owned by the
  installer, so it cannot be written, truncated or chmod-ed through the link.  The run
  can still replace it (delete, then create), as the folder holding it is the run's;
* links are never followed: one whose target stays inside the skill is recreated as a
  link, any other is skipped with a warning; special files are skipped too.

The installed skill is never modified: nothing of it is writable by the run.

A copy can also be made ahead of its run (:func:`stage`: a warm pool container's
quiet moment), in a folder of its workspace that the container's user cannot enter,
and moved into place when the run is for that skill and the skill has not changed
since (:func:`place`): one rename instead of a copy on the run's path.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import TooLarge
from ..paths import is_within
from ..workspace.layout import RUN_LINKS, Workspace, add_root_links, add_run_links, shadowed
from ..workspace.remove import remove_tree

SKIP = frozenset({".git", "__pycache__"})
#: Files at least this large are hard linked (read-only) rather than copied, when safe.
LINK_MIN_BYTES = 1 << 20
RUN_LINK_NAMES = frozenset(RUN_LINKS)


def _safe_to_link(st: os.stat_result, user: tuple[int, int]) -> bool:
    """A hard link shares the source's inode: only safe if ``user`` cannot write (or
    chmod) it, and it carries no set-id bit."""
    uid, gid = user
    if uid == 0 or st.st_uid == uid or st.st_mode & (0o002 | stat.S_ISUID | stat.S_ISGID):
        return False
    return not (st.st_mode & 0o020 and st.st_gid == gid)


def _copy_file(src: Path, dst: Path, mode: int, owner: tuple[int, int] | None) -> None:
    """One file's copy in a few system calls (per-run cost: skills have hundreds).

    A script (``#!``) is made executable: skills are often published, or zipped, without
    the bit, and their SKILL.md still says ``scripts/x.py ...``.  The copy keeps the
    installed file's times, so a file the run writes differs from its source
    (:func:`~skill_executor.outputs.collect.collect` collects those from the skill's folder).
    """
    fd_in = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if not mode & 0o100 and os.pread(fd_in, 2, 0) == b"#!":
            mode |= 0o111
        fd_out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
        try:
            try:
                while os.sendfile(fd_out, fd_in, None, 1 << 24):
                    pass
            except OSError:  # a file system without sendfile: plain reads and writes
                os.lseek(fd_in, 0, os.SEEK_SET)
                os.ftruncate(fd_out, 0)
                os.lseek(fd_out, 0, os.SEEK_SET)
                while chunk := os.read(fd_in, 1 << 20):
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(fd_out, view) :]
            if owner is not None:
                os.fchown(fd_out, *owner)
            os.fchmod(fd_out, mode)  # the umask may have taken bits off
            source = os.fstat(fd_in)  # the installed file's times: what the run changes shows (written_by_run)
            os.utime(fd_out, ns=(source.st_atime_ns, source.st_mtime_ns))
        finally:
            os.close(fd_out)
    finally:
        os.close(fd_in)


def make_view(workspace: Workspace, source: Path, owner: tuple[int, int] | None) -> list[str]:
    """Create ``SKILL_DIR``: the run's private copy of ``source`` (owned by ``owner``,
    None: this process's user) with the ``out``, ``work`` and ``inputs`` links.

    Returns warnings: links out of the skill, special files, and a skill entry named
    ``out``, ``work`` or ``inputs`` (hidden by the run's directory of that name).
    """
    view = workspace.skill_view
    view.mkdir(mode=0o755)
    warnings = copy_skill(source, view, owner=owner, skip_top=RUN_LINK_NAMES)
    add_root_links(workspace.root, workspace.skill_id, os.listdir(view))
    add_run_links(view)
    return warnings + shadowed(os.listdir(source))


def add_sibling(workspace: Workspace, name: str, source: Path, reader: tuple[int, int] | None) -> list[str]:
    """Another skill beside the run's own, in ``SKILLS_DIR/<name>``: a copy owned by the
    service, so the run (``reader``, another user on every isolating runtime) can read it,
    not change it; its large files hard linked (no data moves).  A name taken already (the
    run's own skill) is left as it is.  Warnings, as :func:`copy_skill`'s."""
    target = workspace.skills_dir / name
    if os.path.lexists(target):
        return []
    target.mkdir(mode=0o755)
    return [f"{name}: {w}" for w in copy_skill(source, target, owner=None, reader=reader)]


def add_node_modules(workspace: Workspace, target: str) -> None:
    """``node_modules`` in the workspace root, a link to ``target`` (a skill environment's
    modules as the run sees them): Node's ESM resolution, which ignores NODE_PATH, walks up
    from the skill's scripts and finds them there (then the image's, in ``/node_modules``)."""
    link = workspace.root / "node_modules"
    if not os.path.lexists(link):
        os.symlink(target, link)


def tree_signature(source: Path) -> tuple[Any, ...]:
    """What changes whenever anything :func:`copy_skill` copies does: (path, size,
    mtime, mode, owner, inode) of every entry, links not followed.

    Not the ctime: hard links to a file (a copy's large files, a registry's shared
    blobs) change it without changing the file.  An edit in place changes the mtime; a
    replaced file is a new inode.
    """
    entries: list[tuple[Any, ...]] = []
    for dirpath, dirnames, filenames in os.walk(source):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP)
        for name in sorted([*dirnames, *filenames]):
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                entries.append((dirpath, name, None))
                continue
            entries.append((dirpath, name, st.st_size, st.st_mtime_ns, st.st_mode, st.st_uid, st.st_gid, st.st_ino))
    return tuple(entries)


@dataclass(slots=True)
class StagedSkill:
    """A run's copy of a skill made ahead of the run, at ``folder / skill_id``."""

    skill_id: str
    source: Path
    folder: Path
    signature: tuple[Any, ...]
    warnings: list[str]

    def matches(self, skill_id: str, source: Path) -> bool:
        """Is this a copy of ``source`` as it is now (for the run of ``skill_id``)?"""
        return skill_id == self.skill_id and source == self.source and tree_signature(source) == self.signature


def stage(folder: Path, skill_id: str, source: Path, owner: tuple[int, int] | None) -> StagedSkill:
    """Copy ``source`` into ``folder / skill_id`` (``folder`` is this process's, made
    for it, in the workspace's ``skills/``, and no run can enter it) as :func:`make_view`
    would into a workspace."""
    signature = tree_signature(source)  # before the copy: a change while it copies shows later
    view = folder / skill_id
    view.mkdir(mode=0o755)
    warnings = copy_skill(source, view, owner=owner, skip_top=RUN_LINK_NAMES)
    add_run_links(view)
    return StagedSkill(skill_id, source, folder, signature, warnings + shadowed(os.listdir(source)))


def place(workspace: Workspace, staged: StagedSkill) -> list[str]:
    """Move a staged copy into ``workspace`` as its ``SKILL_DIR`` (one rename; the
    staged copy must :meth:`~StagedSkill.matches` the run's skill; its folder goes);
    the warnings."""
    view = workspace.skill_view
    os.rename(staged.folder / staged.skill_id, view)
    os.rmdir(staged.folder)
    add_root_links(workspace.root, workspace.skill_id, os.listdir(view))
    return list(staged.warnings)


def provide(
    workspace: Workspace, skill_id: str, source: Path, owner: tuple[int, int] | None, staged: StagedSkill | None
) -> list[str]:
    """The run's copy of its skill, in place: the ``staged`` one when it is a copy of
    ``source`` as it is now (:func:`place`), else made now (:func:`make_view`; another
    skill's staged copy, or a stale one, is removed first: never the run's to see).
    Returns the warnings; a copy that does not fit the run's volume is ``skill_too_large``."""
    try:
        if staged is not None and staged.matches(skill_id, source):
            return place(workspace, staged)
        if staged is not None:
            remove_tree(staged.folder)
        return make_view(workspace, source, owner)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        raise TooLarge(
            f"skill {skill_id!r} is larger than a run's workspace holds beside its disk cap", code="skill_too_large"
        ) from None


def copy_skill(
    source: Path,
    dest: Path,
    *,
    owner: tuple[int, int] | None,
    skip_top: frozenset[str] = frozenset(),
    link_min_bytes: int = LINK_MIN_BYTES,
    reader: tuple[int, int] | None = None,
) -> list[str]:
    """Copy ``source`` into the existing folder ``dest`` for the user ``owner``; return warnings.

    Folders and copied files belong to ``owner`` and are writable by it (files keep
    their execute bits); large files it cannot write are hard linked (see the module).
    Without ``owner`` (the local runtime: the run is this process's user) everything is
    copied -- unless ``reader`` names the run's user of a copy it may only read (a sibling
    skill): then large files it cannot write are hard linked too.
    """
    warnings: list[str] = []
    real_root = source.resolve()
    chown = owner if owner is not None and owner != (os.getuid(), os.getgid()) else None
    if chown is not None:
        os.chown(dest, *chown)
    for dirpath, dirnames, filenames in os.walk(source):
        rel_dir = os.path.relpath(dirpath, source)
        skip = SKIP | skip_top if rel_dir == "." else SKIP
        dirnames[:] = sorted(d for d in dirnames if d not in skip)
        if rel_dir == ".":
            filenames = [f for f in filenames if f not in skip_top]
        target_dir = dest if rel_dir == "." else dest / rel_dir
        for name in [*dirnames, *sorted(filenames)]:
            src = Path(dirpath, name)
            dst = target_dir / name
            rel = os.path.normpath(os.path.join(rel_dir, name))
            st = os.lstat(src)
            if stat.S_ISLNK(st.st_mode):
                if name in dirnames:
                    dirnames.remove(name)
                target = src.resolve()
                if is_within(target, real_root):
                    os.symlink(os.path.relpath(target, src.parent.resolve()), dst)
                    if chown is not None:
                        os.lchown(dst, *chown)
                else:
                    warnings.append(f"skill file {rel!r} is a link out of the skill; not copied")
            elif stat.S_ISDIR(st.st_mode):
                dst.mkdir(mode=0o755)
                if chown is not None:
                    os.chown(dst, *chown)
            elif stat.S_ISREG(st.st_mode):
                linker = owner if owner is not None else reader
                if linker is not None and st.st_size >= link_min_bytes and _safe_to_link(st, linker):
                    try:
                        os.link(src, dst, follow_symlinks=False)
                        continue
                    except OSError:
                        pass  # another file system, say: copy instead
                _copy_file(src, dst, (st.st_mode & 0o755) | 0o600, chown)
            else:
                warnings.append(f"skill file {rel!r} is a special file; not copied")
    return warnings
