"""A real Postgres for the tests: ``postgres_server`` (one per session, per xdist worker)
and ``postgres_url`` (a fresh empty database per test, dropped after).

The server is the system's Postgres binaries (``scripts/lib.sh`` ``ensure_postgres``
installs Debian's ``postgresql`` and exports ``SKILL_EXECUTOR_PG_BIN``), started on a free
127.0.0.1 port with its data and unix socket in a temporary folder. Without the binaries
the tests that ask for it skip with the reason (``SKILL_EXECUTOR_TEST_POSTGRES_SKIP``); in
CI (``CI=true``) they fail.

Running as root (initdb and the server refuse it) the folder belongs to, and the server
runs as, the ``postgres`` system user. The postmaster is this process's direct child
(not daemonized by ``pg_ctl``) with SIGQUIT (an immediate shutdown) as its parent-death
signal: it cannot outlive the test process, even one that is killed. Each server leaves a
record below the worker's base temp folder (``RECORDS``) naming its folder, so the
session-end leftover check (``tests/leftovers.py``) catches a server or a folder left
behind.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

#: The bin folder of the Postgres to use (``scripts/lib.sh`` sets it); else the newest
#: ``/usr/lib/postgresql/*/bin`` (Debian's layout).
PG_BIN_ENV = "SKILL_EXECUTOR_PG_BIN"
#: Set by ``scripts/test.sh`` to why Postgres is unavailable: its tests skip with that reason.
SKIP_ENV = "SKILL_EXECUTOR_TEST_POSTGRES_SKIP"
#: The folder below a (worker's) base temp folder holding one record per server started:
#: a file whose text is the server's folder.
RECORDS = "postgres-servers"
#: The system user that owns the folder and runs the server when the tests run as root.
SYSTEM_USER = "postgres"
#: The bootstrap superuser (the fixtures' own connections) and the role the tests connect as.
ADMIN_ROLE = "postgres"
TEST_ROLE = "executor"
#: Settings for a throw-away server: loopback only, no durability work.
SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "logging_collector": "off",
    "log_min_messages": "warning",
    "max_connections": "100",
}
STOP_SIGNALS = {"smart": signal.SIGTERM, "fast": signal.SIGINT, "immediate": signal.SIGQUIT}
START_SECONDS = 30.0
STOP_SECONDS = 30.0


def pg_bin() -> Path | None:
    """The folder with ``initdb`` and ``postgres``, or None when there is none."""
    chosen = os.environ.get(PG_BIN_ENV)
    if chosen:
        return Path(chosen)
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda path: int(path.parent.parent.name) if path.parent.parent.name.isdigit() else 0,
    )
    return found[-1].parent if found else None


def postgres_problem() -> str | None:
    """Why a Postgres server cannot be started here (None when it can)."""
    reason = os.environ.get(SKIP_ENV)
    if reason:
        return reason
    folder = pg_bin()
    if folder is None:
        return "no Postgres server binaries (/usr/lib/postgresql/*/bin/initdb; ./scripts/test.sh installs them)"
    for tool in ("initdb", "postgres"):
        if not os.access(folder / tool, os.X_OK):
            return f"{folder / tool} is not an executable ({PG_BIN_ENV})"
    if shutil.which("setpriv") is None:
        return "setpriv (util-linux) is needed to start Postgres"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(SYSTEM_USER)
        except KeyError:
            return f"running as root, Postgres needs the {SYSTEM_USER!r} system user (Debian's postgresql makes it)"
    return None


def require_postgres() -> None:
    """Skip (or, in CI, fail) a test when no Postgres server can be started here."""
    from .conftest import in_ci

    problem = postgres_problem()
    if problem is None:
        return
    if in_ci():
        pytest.fail(f"CI must run the Postgres tests on a real server: {problem}")
    pytest.skip(problem)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PostgresError(RuntimeError):
    """The test server could not be set up (its log's tail included)."""


class PostgresServer:
    """One throw-away Postgres cluster: :meth:`start` it (initdb the first time), then
    :meth:`create_database` / :meth:`url`; :meth:`stop`, :meth:`start`, :meth:`restart`
    for the tests of a database restart (the port and the data stay); :meth:`close` stops
    it at once and removes everything."""

    def __init__(self, records: Path, bin_dir: Path | None = None) -> None:
        self.bin = bin_dir or pg_bin() or Path("/nonexistent")
        self.folder = Path(tempfile.mkdtemp(prefix="skill-executor-pg-"))
        records.mkdir(parents=True, exist_ok=True)
        (records / self.folder.name).write_text(f"{self.folder}\n")
        self.data = self.folder / "data"
        self.socket_dir = self.folder / "socket"
        self.log = self.folder / "server.log"
        self.port = 0
        self.admin_password = secrets.token_hex(16)
        self.password = secrets.token_hex(16)
        self.process: subprocess.Popen[bytes] | None = None
        self._admin: psycopg.Connection[tuple[object, ...]] | None = None
        self._databases = 0
        self._user: pwd.struct_passwd | None = pwd.getpwnam(SYSTEM_USER) if os.geteuid() == 0 else None
        if self._user is not None:
            os.chown(self.folder, self._user.pw_uid, self._user.pw_gid)
        self.socket_dir.mkdir()
        self._own(self.socket_dir)

    # --- processes ---------------------------------------------------------------------

    def _own(self, path: Path) -> None:
        if self._user is not None:
            os.chown(path, self._user.pw_uid, self._user.pw_gid)

    def _argv(self, tool: str, *args: str) -> list[str]:
        """``tool`` run as the server's user, with SIGQUIT when this process dies."""
        prefix = ["setpriv", "--pdeathsig", "QUIT"]
        if self._user is not None:
            prefix += ["--reuid", str(self._user.pw_uid), "--regid", str(self._user.pw_gid), "--clear-groups"]
        return [*prefix, "--", str(self.bin / tool), *args]

    @staticmethod
    def _env() -> dict[str, str]:
        # None of the caller's PG* variables (PGDATA, PGPORT, ...) may reach the server.
        return {"PATH": "/usr/bin:/bin", "LC_ALL": "C", "LANG": "C", "TZ": "UTC"}

    def _initdb(self) -> None:
        secret = self.folder / "pwfile"
        secret.write_text(self.admin_password + "\n")
        self._own(secret)
        os.chmod(secret, 0o600)
        try:
            done = subprocess.run(
                self._argv(
                    "initdb",
                    "--pgdata",
                    str(self.data),
                    "--username",
                    ADMIN_ROLE,
                    "--pwfile",
                    str(secret),
                    "--auth",
                    "scram-sha-256",
                    "--encoding",
                    "UTF8",
                    "--locale",
                    "C",
                    "--no-sync",
                    "--no-instructions",
                ),
                cwd=self.folder,
                env=self._env(),
                capture_output=True,
                timeout=120,
            )
        finally:
            secret.unlink()
        if done.returncode != 0:
            raise PostgresError(f"initdb failed ({done.returncode}): {(done.stdout + done.stderr).decode()[-2000:]}")
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write("\n# tests/pgserver.py\n")
            conf.write(f"unix_socket_directories = '{self.socket_dir}'\n")
            conf.writelines(f"{key} = {value}\n" for key, value in SETTINGS.items())

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        """Start the server (initdb the first time, on a free port; later on the same port)."""
        if self.running:
            return
        first = self.port == 0
        if first:
            self._initdb()
        for _attempt in range(5):
            if first:
                self.port = free_port()
            if self._launch():
                break
            if not first or "already in use" not in self._log_tail():
                raise PostgresError(f"Postgres did not start on port {self.port}: {self._log_tail()}")
        else:
            raise PostgresError(f"Postgres found no free port: {self._log_tail()}")
        if first:
            with self.admin() as conn:
                conn.execute(
                    sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                        sql.Identifier(TEST_ROLE), sql.Literal(self.password)
                    )
                )

    def _launch(self) -> bool:
        """Start the postmaster; True once it accepts connections, False if it exited."""
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                self._argv("postgres", "-D", str(self.data), "-p", str(self.port)),
                cwd=self.folder,
                env=self._env(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C reaches pytest (which stops it), not the server
            )
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                psycopg.connect(self.url("postgres", admin=True), connect_timeout=2).close()
                return True
            except psycopg.OperationalError:
                time.sleep(0.05)
        self.stop("immediate")
        raise PostgresError(f"Postgres did not accept connections within {START_SECONDS:.0f} s: {self._log_tail()}")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server as ``pg_ctl stop -m MODE`` would (``immediate``: no checkpoint,
        the next start recovers) and wait for it to exit."""
        self._drop_admin()
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.send_signal(STOP_SIGNALS[mode])
        try:
            process.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=STOP_SECONDS)
            raise PostgresError(f"Postgres did not stop ({mode}) within {STOP_SECONDS:.0f} s; killed") from None

    def restart(self, mode: str = "fast") -> None:
        self.stop(mode)
        self.start()

    def close(self) -> None:
        """Stop at once and remove the folder (the record stays: the leftover check reads it)."""
        try:
            self.stop("immediate")
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)

    def _log_tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-2000:]
        except OSError:
            return "(no log)"

    # --- databases ---------------------------------------------------------------------

    def url(self, database: str, *, admin: bool = False) -> str:
        role, password = (ADMIN_ROLE, self.admin_password) if admin else (TEST_ROLE, self.password)
        return f"postgresql://{role}:{password}@127.0.0.1:{self.port}/{database}"

    def admin(self) -> psycopg.Connection[tuple[object, ...]]:
        """A new autocommit superuser connection (close it: ``with server.admin() as c``)."""
        return psycopg.connect(self.url("postgres", admin=True), autocommit=True, connect_timeout=10)

    def _admin_connection(self) -> psycopg.Connection[tuple[object, ...]]:
        if self._admin is None or self._admin.closed or self._admin.broken:
            self._admin = self.admin()
        return self._admin

    def _drop_admin(self) -> None:
        if self._admin is not None:
            self._admin.close()
            self._admin = None

    def create_database(self) -> str:
        """A new empty database owned by the test role; its name."""
        self.start()
        self._databases += 1
        name = f"test_{self._databases}"
        self._admin_connection().execute(
            sql.SQL("CREATE DATABASE {} OWNER {} TEMPLATE template0 STRATEGY file_copy").format(
                sql.Identifier(name), sql.Identifier(TEST_ROLE)
            )
        )
        return name

    def drop_database(self, name: str) -> None:
        """Drop it, closing whatever connections to it are still open."""
        self.start()
        self._admin_connection().execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer]:
    """One running Postgres for the session (with xdist: per worker), stopped at its end."""
    require_postgres()
    server = PostgresServer(tmp_path_factory.getbasetemp() / RECORDS)
    try:
        server.start()
        yield server
    finally:
        server.close()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """A ``postgresql://`` URL (the test role, its password, 127.0.0.1) of a fresh empty
    database that only this test sees; dropped after (the server restarted if a test
    stopped it)."""
    name = postgres_server.create_database()
    yield postgres_server.url(name)
    postgres_server.drop_database(name)
