"""Each session's sandbox for its processes (its *host*): made with the session's first
process by a runtime with the capability
(:class:`~skill_executor.runtimes.base.SupportsProcesses`), removed with its last; while it
lives, the session's ``work/`` is held.  A key, and the service, hold a bounded number of
them: each is as big as a run's container and takes no run slot."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..access import check_tenant
from ..config import Settings
from ..errors import Busy, ExecutorError
from ..runtimes.base import Runtime, RuntimeHost, SupportsProcesses
from ..runtimes.egress import EgressPath
from ..workspace.fs import Tree
from ..workspace.sessions import SessionStore
from .base import HOST_LIFETIMES
from .output import SessionProcess

#: Kept between a process's wall-clock limit and its sandbox's deadline.
HOST_GRACE_SECONDS = 60.0

#: (tenant, session)
Key = tuple[str, str]


@dataclass(eq=False)
class SessionHost:
    host: RuntimeHost
    #: When the host's container is past its deadline label (``time.time()``): the
    #: runtime's reaper removes it then, so no process of it may outlive that.
    deadline: float
    #: The session's network it was made with (None: none; a grant opened later does not reach it).
    egress: EgressPath | None = None
    processes: dict[str, SessionProcess] = field(default_factory=dict)


class SessionHosts:
    """The sessions' hosts of one service process (thread-safe; a session's host is made,
    used and dropped holding the session's :meth:`lock`)."""

    def __init__(self, settings: Settings, runtime: Runtime, sessions: SessionStore) -> None:
        self.settings = settings
        self.runtime = runtime
        self.sessions = sessions
        #: The runtime's capability (None: it has no interactive processes).
        self.maker: SupportsProcesses | None = runtime if isinstance(runtime, SupportsProcesses) else None
        self._lock = threading.Lock()
        self._hosts: dict[Key, SessionHost] = {}
        self._locks: dict[Key, threading.Lock] = {}
        self._making: set[Key] = set()  # sessions whose host is being made (counted)

    @property
    def supported(self) -> bool:
        return self.maker is not None

    def require(self) -> SupportsProcesses:
        """The runtime's capability, or 501 ``processes_unsupported``."""
        if self.maker is None:
            name = getattr(self.runtime, "name", "?")
            raise ExecutorError(
                f"the {name} runtime has no interactive processes: run the service with SKILL_EXECUTOR_RUNTIME=docker",
                code="processes_unsupported",
            )
        return self.maker

    def lock(self, key: Key) -> threading.Lock:
        """The lock a session's host is made, used and dropped under."""
        with self._lock:
            return self._locks.setdefault(key, threading.Lock())

    def get(self, key: Key) -> SessionHost | None:
        return self._hosts.get(key)

    def all(self) -> list[tuple[Key, SessionHost]]:
        with self._lock:
            return list(self._hosts.items())

    def __len__(self) -> int:
        return len(self._hosts)

    def make(
        self,
        tenant: str,
        session: str,
        before: Callable[[str, str], None] | None = None,
        egress: EgressPath | None = None,
    ) -> SessionHost:
        """A new host (called holding its lock), if the key's and the service's counts of
        sandboxes allow it (without a bound, one key could hold ``sessions_per_tenant`` of
        them for hours); ``before`` is called with (tenant, session) first; ``egress``: the
        session's network (its grant's path: the bridge, the mounts, every process's variables)."""
        key = (check_tenant(tenant), session)
        s = self.settings
        with self._lock:
            held = set(self._hosts) | self._making
            mine = sum(1 for t, _ in held if t == key[0])
            if mine >= s.process_sandboxes_per_key or len(held) >= s.process_sandboxes:
                per_key = mine >= s.process_sandboxes_per_key
                raise Busy(
                    f"{mine} sessions of this key have processes, the most allowed "
                    "(SKILL_EXECUTOR_PROCESS_SANDBOXES_PER_KEY): end the processes of one first"
                    if per_key
                    else f"{len(held)} sessions have processes, the most this service allows "
                    "(SKILL_EXECUTOR_PROCESS_SANDBOXES): try again later",
                    code="process_limit",
                    details={
                        "sandboxes": mine if per_key else len(held),
                        "limit": s.process_sandboxes_per_key if per_key else s.process_sandboxes,
                    },
                )
            self._making.add(key)
        try:
            if before is not None:
                before(key[0], session)
            return self._make(tenant, session, egress)
        finally:
            with self._lock:
                self._making.discard(key)

    def _make(self, tenant: str, session: str, egress: EgressPath | None) -> SessionHost:
        maker = self.require()
        key = (check_tenant(tenant), session)
        work: Path = self.sessions.hold(session, tenant, wait=self.settings.max_timeout)
        owner = self.runtime.owner
        if owner is not None:  # the runs' user owns work/, as a run's workspace makes it
            with Tree(work) as tree:
                os.fchown(tree.fd, *owner)
        lifetime = HOST_LIFETIMES * self.settings.process_max_seconds
        try:
            host = maker.host(work, f"processes-{key[0]}-{session}", lifetime, egress)
        except BaseException:
            self.sessions.release(session, tenant)
            raise
        entry = SessionHost(host, time.time() + lifetime - HOST_GRACE_SECONDS, egress)
        self._hosts[key] = entry
        return entry

    def drop(self, key: Key, entry: SessionHost) -> None:
        """Remove a host with no live processes (called holding its lock); once."""
        if self._hosts.get(key) is not entry:
            return
        del self._hosts[key]
        try:
            self.require().unhost(entry.host)
        finally:
            self.sessions.release(key[1], key[0])
