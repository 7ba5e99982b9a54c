"""The Postgres test fixtures (tests/pgserver.py): a fresh database per test, a server on
loopback only, restarts that keep the data, and a server that never outlives its session."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from .. import leftovers
from ..conftest import REPO
from ..helpers import eventually
from ..pgserver import ADMIN_ROLE, RECORDS, TEST_ROLE, PostgresServer, require_postgres


def tables(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1").fetchall()
    return [str(row[0]) for row in rows]


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def listening(pid: int) -> list[tuple[str, str]]:
    """The (family, local address) of every listening TCP socket the process holds."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    found = []
    for family in ("tcp", "tcp6"):
        with open(f"/proc/{pid}/net/{family}") as table:
            for line in table.readlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                    found.append((family, fields[1]))
    return found


def test_each_test_gets_a_fresh_empty_database_of_its_own(postgres_url: str, postgres_server: PostgresServer) -> None:
    assert postgres_url.startswith(f"postgresql://{TEST_ROLE}:{postgres_server.password}@127.0.0.1:")
    assert tables(postgres_url) == []
    with psycopg.connect(postgres_url) as conn:
        conn.execute("CREATE TABLE runs (id text PRIMARY KEY)")
        conn.execute("INSERT INTO runs VALUES ('r1')")
    other = postgres_server.create_database()
    try:
        other_url = postgres_server.url(other)
        assert other_url != postgres_url
        assert tables(other_url) == []  # the first database's table is not there
        with psycopg.connect(other_url) as conn:
            conn.execute("CREATE TABLE runs (id text PRIMARY KEY)")  # the same name: no clash
            assert conn.execute("SELECT count(*) FROM runs").fetchone() == (0,)
        assert tables(postgres_url) == ["runs"]
    finally:
        postgres_server.drop_database(other)
    with psycopg.connect(postgres_server.url("postgres", admin=True)) as conn:
        assert conn.execute("SELECT count(*) FROM pg_database WHERE datname = %s", (other,)).fetchone() == (0,)


def test_the_test_role_is_no_superuser_and_needs_its_password(
    postgres_url: str, postgres_server: PostgresServer
) -> None:
    with psycopg.connect(postgres_url) as conn:
        row = conn.execute("SELECT rolsuper, rolcreatedb, rolcreaterole FROM pg_roles WHERE rolname = current_user")
        assert row.fetchone() == (False, False, False)
        owner = conn.execute("SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = current_database()")
        assert owner.fetchone() == (TEST_ROLE,)
    for role, password in ((TEST_ROLE, "wrong"), (TEST_ROLE, postgres_server.admin_password), (ADMIN_ROLE, "")):
        url = postgres_url.replace(f"{TEST_ROLE}:{postgres_server.password}@", f"{role}:{password}@")
        with pytest.raises(psycopg.OperationalError, match="password authentication failed|no password supplied"):
            psycopg.connect(url, connect_timeout=10).close()


def test_a_restart_keeps_the_data_and_the_url(postgres_url: str, postgres_server: PostgresServer) -> None:
    with psycopg.connect(postgres_url) as conn:
        conn.execute("CREATE TABLE kept (v text)")
        conn.execute("INSERT INTO kept VALUES ('before')")
    held = psycopg.connect(postgres_url, autocommit=True)
    pid = postgres_server.process.pid if postgres_server.process else 0
    postgres_server.restart()
    assert postgres_server.process is not None and postgres_server.process.pid != pid
    with pytest.raises(psycopg.OperationalError):  # a connection from before the restart is gone
        held.execute("SELECT 1")
    held.close()
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT v FROM kept").fetchall() == [("before",)]

    postgres_server.stop()
    assert not postgres_server.running
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(postgres_url, connect_timeout=5).close()
    postgres_server.start()
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT v FROM kept").fetchall() == [("before",)]


def test_an_immediate_stop_keeps_committed_data(postgres_url: str, postgres_server: PostgresServer) -> None:
    """A crash-like stop (no shutdown checkpoint): the next start recovers what was committed."""
    with psycopg.connect(postgres_url) as conn:
        conn.execute("CREATE TABLE kept (v text)")
        conn.execute("INSERT INTO kept VALUES ('committed')")
    with psycopg.connect(postgres_server.url("postgres", admin=True), autocommit=True) as conn:
        # synchronous_commit=off: a commit's WAL reaches the OS within ~0.6 s; this flushes it now.
        conn.execute("SELECT pg_switch_wal()")
    postgres_server.restart("immediate")
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT v FROM kept").fetchall() == [("committed",)]


def test_the_server_listens_on_loopback_only(postgres_server: PostgresServer) -> None:
    assert postgres_server.process is not None
    pid = postgres_server.process.pid
    found = listening(pid)
    # 127.0.0.1 in /proc/net/tcp's little-endian hex, and the fixture's port.
    assert found == [("tcp", f"0100007F:{postgres_server.port:04X}")], found
    with psycopg.connect(postgres_server.url("postgres", admin=True)) as conn:
        settings = dict(
            conn.execute(
                "SELECT name, setting FROM pg_settings WHERE name IN "
                "('listen_addresses', 'unix_socket_directories', 'fsync', 'synchronous_commit')"
            ).fetchall()
        )
    assert settings == {
        "listen_addresses": "127.0.0.1",
        "unix_socket_directories": str(postgres_server.socket_dir),
        "fsync": "off",
        "synchronous_commit": "off",
    }
    assert postgres_server.socket_dir.is_relative_to(postgres_server.folder)
    assert (postgres_server.folder.stat().st_mode & 0o077) == 0  # nobody else can reach the socket or the data


def test_the_server_does_not_outlive_a_killed_test_process(tmp_path: Path) -> None:
    """SIGKILL to the process that started the server (no teardown runs): the server exits,
    and the leftover check names the folder it left."""
    require_postgres()
    base = tmp_path / "base"
    records = base / RECORDS
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from tests.pgserver import PostgresServer\n"
            "server = PostgresServer(Path(sys.argv[1])); server.start()\n"
            "print(server.process.pid, server.folder, flush=True); time.sleep(600)",
            str(records),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    folder, pid = None, 0
    try:
        assert child.stdout is not None
        pid_text, folder = child.stdout.readline().split()
        pid = int(pid_text)
        assert alive(pid)
        assert [line for line in leftovers.postgres(base) if line.startswith("process ")] != []
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        assert eventually(lambda: not alive(pid), timeout=30), "the postmaster outlived the killed test process"
        assert leftovers.postgres(base) == [f"Postgres folder {folder}"]
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if pid and alive(pid):
            os.kill(pid, signal.SIGKILL)
        if folder:
            subprocess.run(["rm", "-rf", folder], check=True)


def test_closing_leaves_nothing_for_the_leftover_check(tmp_path: Path) -> None:
    require_postgres()
    base = tmp_path / "base"
    server = PostgresServer(base / RECORDS)
    try:
        server.start()
        left = leftovers.postgres(base)
        assert any(line.startswith("process ") for line in left), left
        assert f"Postgres folder {server.folder}" in left
    finally:
        server.close()
    assert not server.running
    assert leftovers.postgres(base) == []
