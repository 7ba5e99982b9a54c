"""Removing what is left over on the engine: the containers of dead owners of this
workspace root (at start-up), any owner's containers past their deadline (the reaper),
and this instance's own containers that belong to no run (the reconciliation).

Each removal stands alone: one failure never stops the others.
"""

from __future__ import annotations

import logging
from collections.abc import Set

from ...errors import Unavailable
from ...owners import Lease, LeaseState
from .engine import LABEL_DEADLINE, LABEL_OWNER, LABEL_ROOT, Engine

log = logging.getLogger(__name__)

#: Extra seconds past a container's deadline before the reaper removes it.
REAPER_GRACE_SECONDS = 30.0
#: A container that was created but never started (its start failed, and so did its
#: removal) is a leftover after this long; a start in progress takes milliseconds.
CREATED_GRACE_SECONDS = 10.0
#: A running container of this instance that is neither a run's nor in the pool (a warm
#: container whose removal failed) is a leftover after this long: a pool start, the only
#: moment a container runs unknown to both, takes at most the launcher's ready timeout.
STRAY_GRACE_SECONDS = 60.0


def sweep_dead_owners(engine: Engine, lease: Lease) -> int:
    """Remove the containers of dead owners of this root (judged by their leases,
    :mod:`skill_executor.owners`); a container of another root is left to its deadline.
    One labelled with another root's identity (LABEL_ROOT) is never judged: a copy of this
    data dir (same lease root id, same lease files) made it, which may be alive.
    A container that cannot be removed is logged and skipped (its owner's lease stays,
    so the next start tries again): it never stops this start."""
    owners: dict[str, list[str]] = {}
    for container in engine.managed():
        labels = container.get("Labels") or {}
        if labels.get(LABEL_ROOT, engine.root) != engine.root:
            continue  # another root's (a copied data dir's), whatever its owner token says
        owners.setdefault(labels.get(LABEL_OWNER, ""), []).append(container["Id"])
    removed = 0
    for token in sorted(set(owners) | set(lease.dead_leases())):
        if lease.judge(token) is not LeaseState.DEAD:
            continue
        try:
            with lease.reclaim(token) as ours:
                if ours:
                    count, failed = remove_all(engine, owners.get(token, []))
                    removed += count
                    if failed:
                        raise failed[0]
        except Unavailable as exc:
            log.warning("could not remove what %s left (retried at the next start): %s", token, exc.message)
    if removed:
        log.warning("removed %d container(s) left by a crashed process", removed)
    return removed


def reap_expired(engine: Engine, now: float) -> int:
    """Remove containers of any owner that are past their deadline at ``now``."""
    doomed = []
    for container in engine.managed():
        try:
            deadline = float(container["Labels"].get(LABEL_DEADLINE, "inf"))
        except ValueError:
            deadline = 0.0
        if now > deadline + REAPER_GRACE_SECONDS:
            doomed.append(container["Id"])
    removed, failed = remove_all(engine, doomed)
    if failed:
        raise failed[0]  # counted by the supervisor; the others went all the same
    return removed


def stray_containers(engine: Engine, known: Set[str], now: float) -> list[str]:
    """This instance's containers that belong to no run and are not in ``known`` (the
    runs' and the pool's): ended, never started, or running unknown for too long."""
    leftovers = []
    for container in engine.own():
        state = container.get("State")
        age = now - float(container.get("Created") or now)
        if container["Id"] in known:
            continue
        if (
            state in ("exited", "dead")
            or (state == "created" and age > CREATED_GRACE_SECONDS)
            or (state == "running" and age > STRAY_GRACE_SECONDS)
        ):
            leftovers.append(container["Id"])
    return leftovers


def remove_all(engine: Engine, container_ids: list[str]) -> tuple[int, list[Unavailable]]:
    """Remove each container; (how many this removed, the failures): one failure
    never stops the others."""
    removed = 0
    failed: list[Unavailable] = []
    for container_id in container_ids:
        try:
            removed += engine.remove(container_id, strict=True)
        except Unavailable as exc:
            failed.append(exc)
    return removed, failed
