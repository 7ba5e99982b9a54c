"""A cluster's session processes, as an API replica serves them: each runs on its session's
worker (the one holding the session's lease, which its runs go to as well), and the replica
proxies every call to that worker's own processes routes (:mod:`skill_executor.api.worker`),
which execute them (:class:`~skill_executor.processes.manager.ProcessManager`).

* Start: the session's home worker, else a live worker (the fewest sessions); that worker
  takes the session's lease as the process starts (its runs go there from then on). The
  replica records which worker runs the process (``session_processes``).
* Every later call, on any replica, looks the process up there and goes to its worker's URL
  (``workers.url``), authenticated by the cluster's secret (:func:`internal_secret`) with
  the tenant the replica resolved.
* A process whose worker's lease has run out is reported ended (``reason: lost``, or as it
  ended when a replica saw it end: a kill's or a state's answer); the calls that need it
  alive answer 410 ``process_lost``.
"""

from __future__ import annotations

import json
import secrets
import threading
from typing import Any

import httpx
from sqlalchemy import delete, func, select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert

from ..access import TENANT_HEADER
from ..config import Settings
from ..db import Database
from ..db.schema import cluster_secrets, session_leases, session_processes, workers
from ..errors import ExecutorError, Unavailable
from ..lifecycle.dispatch.postgres import NoWorkers, session_home
from ..lifecycle.dispatch.sweep import now_sql
from .base import HOST_LIFETIMES, KEEP_ENDED_SECONDS, MAX_WAIT_SECONDS, Poll, ProcessLost, ProcessNotFound

#: How long a call to a worker may take besides a poll's wait.
CALL_SECONDS = 30.0


def internal_secret(database: Database, settings: Settings) -> str:
    """The secret of replicas' calls to workers: ``SKILL_EXECUTOR_CLUSTER_SECRET``, else the
    one the first process of the cluster made and kept in the database."""
    if settings.cluster_secret:
        return settings.cluster_secret
    with database.write() as conn:
        conn.execute(
            pg_insert(cluster_secrets)
            .values(name="internal", value=secrets.token_urlsafe(32))
            .on_conflict_do_nothing(index_elements=["name"])
        )
        return str(
            conn.execute(select(cluster_secrets.c.value).where(cluster_secrets.c.name == "internal")).scalar_one()
        )


#: The worker that started the process still runs it: its lease holds, and it is the same
#: process of it (a worker restarted on its data dir keeps its id, not its processes).
_RUNNING = (workers.c.lease_until > text(now_sql())) & (workers.c.started_at <= session_processes.c.started_at)


class RemoteProcess:
    """A process as its worker answered it (a :class:`~skill_executor.processes.base.ProcessView`)."""

    def __init__(self, info: dict[str, Any]) -> None:
        self.info = info

    @property
    def id(self) -> str:
        return str(self.info["id"])

    @property
    def ended(self) -> bool:
        return not self.info["running"]

    @property
    def exit_code(self) -> int | None:
        code = self.info.get("exit_code")
        return None if code is None else int(code)

    def state(self) -> dict[str, Any]:
        return self.info


def _lost(info: dict[str, Any]) -> RemoteProcess:
    """A process of a worker that is gone: as it ended, when a replica saw it end; else lost."""
    if not info["running"]:
        return RemoteProcess(info)
    return RemoteProcess({**info, "running": False, "exit_code": None, "reason": "lost"})


class ClusterProcesses:
    """Every session's processes, through the workers running them (thread-safe)."""

    def __init__(self, database: Database, settings: Settings, *, moving_sessions: bool) -> None:
        self.database = database
        self.settings = settings
        self.moving_sessions = moving_sessions
        self.client = httpx.Client(timeout=CALL_SECONDS)
        self._secret: str | None = None
        self._lock = threading.Lock()

    @property
    def supported(self) -> bool:
        return True

    def secret(self) -> str:
        with self._lock:
            if self._secret is None:
                self._secret = internal_secret(self.database, self.settings)
            return self._secret

    # -- where -----------------------------------------------------------------------------

    def _place(self, tenant: str, session: str) -> tuple[str, str]:
        """The worker a process of ``session`` starts on: (id, url)."""
        alive = (workers.c.lease_until > text(now_sql())) & workers.c.url.is_not(None)
        with self.database.write() as conn:
            home = session_home(conn, tenant, session, moving=self.moving_sessions)
            if home is not None:
                row = conn.execute(select(workers.c.url).where(workers.c.worker_id == home, alive)).first()
                if row is None:
                    raise Unavailable(
                        f"the worker holding session {session!r} cannot take processes now (its lease is running "
                        "out, or it is of a version without them); retry shortly",
                        code="worker_unreachable",
                        retry_after=2,
                        details={"session": session, "worker": home},
                    )
                return home, str(row[0])
            held = (
                select(func.count())
                .where(session_leases.c.worker_id == workers.c.worker_id)
                .scalar_subquery()
                .correlate(workers)
            )
            row = conn.execute(
                select(workers.c.worker_id, workers.c.url)
                .where(alive, workers.c.stopping.is_(False))
                .order_by(held, func.random())
                .limit(1)
            ).first()
        if row is None:
            raise NoWorkers(
                "no worker of the cluster holds a live lease: no process can start; retry shortly", retry_after=5
            )
        return str(row[0]), str(row[1])

    def _route(self, tenant: str, session: str, process_id: str) -> tuple[str | None, dict[str, Any]]:
        """(the URL of the worker running the process, None: it is gone; the state it started with)."""
        with self.database.read() as conn:
            row = conn.execute(
                select(session_processes.c.info, workers.c.url, _RUNNING)
                .select_from(session_processes.outerjoin(workers, workers.c.worker_id == session_processes.c.worker_id))
                .where(
                    session_processes.c.tenant == tenant,
                    session_processes.c.session == session,
                    session_processes.c.process_id == process_id,
                )
            ).first()
        if row is None:
            raise ProcessNotFound(
                f"no process {process_id!r} in session {session!r}", details={"session": session, "process": process_id}
            )
        return (str(row[1]) if row[1] is not None and row[2] else None), json.loads(row[0])

    def _call(
        self,
        method: str,
        url: str,
        tenant: str,
        session: str,
        path: str = "",
        *,
        body: dict[str, Any] | None = None,
        params: dict[str, Any] | None = None,
        wait: float = 0.0,
    ) -> Any:
        headers = {"Authorization": f"Bearer {self.secret()}", TENANT_HEADER: tenant}
        try:
            answer = self.client.request(
                method,
                f"{url}/v1/sessions/{session}/processes{path}",
                json=body,
                params=params,
                headers=headers,
                timeout=CALL_SECONDS + wait,
            )
        except httpx.TransportError as exc:
            raise Unavailable(
                f"the worker running session {session!r}'s processes does not answer ({type(exc).__name__}); "
                "retry shortly (once its lease has run out, its processes are reported lost)",
                code="worker_unreachable",
                retry_after=2,
                details={"session": session},
            ) from exc
        if answer.status_code == 401:  # never the caller's key: the replica and the worker disagree
            raise Unavailable(
                f"the worker running session {session!r}'s processes refused this replica's cluster secret: set "
                "the same SKILL_EXECUTOR_CLUSTER_SECRET on every replica and worker (or on none)",
                code="worker_unreachable",
                retry_after=5,
                details={"session": session},
            )
        if answer.status_code >= 400:
            try:
                error = answer.json()["error"]
                code, message, details = str(error["code"]), str(error["message"]), error.get("details")
            except (ValueError, KeyError, TypeError):
                code, message, details = "worker_unreachable", f"the worker answered {answer.status_code}", None
            retry = answer.headers.get("Retry-After")
            raise ExecutorError(
                message,
                code=code,
                status=answer.status_code,
                details=details,
                retry_after=int(retry) if retry and retry.isdigit() else None,
            )
        return answer.json()

    # -- the calls -------------------------------------------------------------------------

    def start(
        self,
        tenant: str,
        session: str,
        command: str | list[str],
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        pty: bool = False,
        timeout: float | None = None,
        idle_timeout: float | None = None,
    ) -> RemoteProcess:
        body = {
            "command": command,
            "env": env or {},
            "cwd": cwd,
            "pty": pty,
            "timeout": timeout,
            "idle_timeout": idle_timeout,
        }
        body = {k: v for k, v in body.items() if v is not None}
        for attempt in range(3):
            worker_id, url = self._place(tenant, session)
            try:
                info = self._call("POST", url, tenant, session, body=body)
                break
            except ExecutorError as exc:  # another worker took the session meanwhile: go there
                if exc.code != "session_elsewhere" or attempt == 2:
                    raise
        with self.database.write() as conn:
            # what has ended and been forgotten for long on any worker is forgotten here too
            horizon = HOST_LIFETIMES * self.settings.process_max_seconds + KEEP_ENDED_SECONDS
            conn.execute(
                delete(session_processes).where(session_processes.c.started_at < text(f"{now_sql()} - {horizon}"))
            )
            conn.execute(
                pg_insert(session_processes)
                .values(
                    tenant=tenant,
                    session=session,
                    process_id=str(info["id"]),
                    worker_id=worker_id,
                    info=json.dumps(info),
                    started_at=text(now_sql()),
                )
                .on_conflict_do_nothing()
            )
        return RemoteProcess(info)

    def list(self, tenant: str, session: str) -> list[RemoteProcess]:
        with self.database.read() as conn:
            rows = conn.execute(
                select(
                    session_processes.c.info,
                    session_processes.c.worker_id,
                    workers.c.url,
                    _RUNNING,
                )
                .select_from(session_processes.outerjoin(workers, workers.c.worker_id == session_processes.c.worker_id))
                .where(session_processes.c.tenant == tenant, session_processes.c.session == session)
                .order_by(session_processes.c.started_at)
            ).all()
        found: dict[str, RemoteProcess] = {}
        for url in dict.fromkeys(str(r[2]) for r in rows if r[2] is not None and r[3]):
            for info in self._call("GET", url, tenant, session)["processes"]:
                found[str(info["id"])] = RemoteProcess(info)
        for info, *_ in (r for r in rows if r[2] is None or not r[3]):
            lost = _lost(json.loads(info))
            found.setdefault(lost.id, lost)
        return sorted(found.values(), key=lambda p: float(p.info.get("started_at") or 0))

    def _seen(self, tenant: str, session: str, info: dict[str, Any]) -> RemoteProcess:
        """A worker's answer; an ended process's end is kept (reported so if its worker goes)."""
        if not info["running"]:
            with self.database.write() as conn:
                conn.execute(
                    update(session_processes)
                    .where(
                        session_processes.c.tenant == tenant,
                        session_processes.c.session == session,
                        session_processes.c.process_id == str(info["id"]),
                    )
                    .values(info=json.dumps(info))
                )
        return RemoteProcess(info)

    def get(self, tenant: str, session: str, process_id: str) -> RemoteProcess:
        url, info = self._route(tenant, session, process_id)
        if url is None:
            return _lost(info)
        return self._seen(tenant, session, self._call("GET", url, tenant, session, f"/{process_id}"))

    def _alive(self, tenant: str, session: str, process_id: str) -> str:
        url, _ = self._route(tenant, session, process_id)
        if url is None:
            raise ProcessLost(
                f"process {process_id!r} ran on a worker that is gone: it ended with it, and its output is lost",
                details={"session": session, "process": process_id},
            )
        return url

    def write(self, tenant: str, session: str, process_id: str, data: bytes, *, eof: bool = False) -> RemoteProcess:
        url = self._alive(tenant, session, process_id)
        body = {"data": data.decode("utf-8", errors="replace"), "eof": eof}
        return RemoteProcess(self._call("POST", url, tenant, session, f"/{process_id}/stdin", body=body))

    def poll(
        self, tenant: str, session: str, process_id: str, *, after: int = 0, limit: int = 64 * 1024, wait: float = 0.0
    ) -> Poll:
        url = self._alive(tenant, session, process_id)
        wait = min(wait, MAX_WAIT_SECONDS)
        params = {"after": after, "limit": limit, "wait": wait}
        polled = self._call("GET", url, tenant, session, f"/{process_id}/output", params=params, wait=wait)
        return Poll(**{k: polled[k] for k in Poll.__dataclass_fields__})

    def signal(self, tenant: str, session: str, process_id: str, name: str) -> RemoteProcess:
        url = self._alive(tenant, session, process_id)
        return RemoteProcess(self._call("POST", url, tenant, session, f"/{process_id}/signal", body={"signal": name}))

    def kill(self, tenant: str, session: str, process_id: str) -> RemoteProcess:
        url, info = self._route(tenant, session, process_id)
        if url is None:
            return _lost(info)  # ended with its worker
        return self._seen(tenant, session, self._call("DELETE", url, tenant, session, f"/{process_id}"))

    def close(self) -> None:
        self.client.close()
