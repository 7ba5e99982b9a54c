"""Tell connected clients when the skill catalog changes (installed, updated, removed): over
2025-11-25 connections and on 2026-07-28 ``subscriptions/listen`` streams (:meth:`SkillServer.notify_list_changed`)."""

from __future__ import annotations

import os

import anyio

from ..registry import SkillRepository
from .catalog import SCHEME
from .server import SkillServer

#: How often the catalog is compared with what clients last saw.
WATCH_SECONDS = 1.0


def fingerprint(repository: SkillRepository) -> tuple[tuple[str, str, int, int], ...]:
    """Each skill's id, folder and SKILL.md (mtime, size): changes on install, update, removal."""
    out = []
    for skill in repository.list(include_hidden=True):
        try:
            st = os.stat(skill.skill_file)
            key = (st.st_mtime_ns, st.st_size)
        except OSError:
            key = (0, 0)
        out.append((skill.id, str(skill.path), *key))
    return tuple(sorted(out))


def updated(
    before: tuple[tuple[str, str, int, int], ...], after: tuple[tuple[str, str, int, int], ...]
) -> tuple[str, ...]:
    """The ``SKILL.md`` URIs of the skills in both fingerprints whose entry changed."""
    was = {entry[0]: entry for entry in before}
    return tuple(f"{SCHEME}{entry[0]}/SKILL.md" for entry in after if entry[0] in was and was[entry[0]] != entry)


async def watch_catalog(repository: SkillRepository, server: SkillServer, interval: float = WATCH_SECONDS) -> None:
    seen = await anyio.to_thread.run_sync(lambda: fingerprint(repository))
    while True:
        await anyio.sleep(interval)
        try:
            now = await anyio.to_thread.run_sync(lambda: fingerprint(repository))
        except Exception:  # a failed rescan: try again next time
            continue
        if now != seen:
            changed = updated(seen, now)
            seen = now
            await server.notify_list_changed(changed)
