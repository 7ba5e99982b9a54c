"""The job queue's connector rides out a lost connection, and only that (error paths: the
restart itself is in test_cluster)."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import psycopg_pool
import pytest
from procrastinate import exceptions

from skill_executor.lifecycle.dispatch import connector as steady
from skill_executor.lifecycle.dispatch.connector import SteadyConnector, connection_failed


def failure(cause: BaseException) -> exceptions.ConnectorException:
    try:
        raise exceptions.ConnectorException() from cause
    except exceptions.ConnectorException as exc:
        return exc


def test_only_a_failed_connection_counts() -> None:
    assert connection_failed(failure(psycopg.OperationalError("server closed the connection")))
    assert connection_failed(failure(psycopg.errors.AdminShutdown("terminating connection")))
    assert connection_failed(failure(psycopg.errors.CannotConnectNow("the database system is starting up")))
    assert connection_failed(failure(psycopg_pool.PoolTimeout("couldn't get a connection")))
    assert not connection_failed(failure(psycopg.errors.SyntaxError("bad")))
    assert not connection_failed(failure(psycopg.errors.QueryCanceled("statement timeout")))  # an OperationalError
    assert not connection_failed(failure(psycopg.errors.LockNotAvailable("lock")))
    assert not connection_failed(exceptions.ConnectorException())


@pytest.fixture(autouse=True)
def no_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(steady, "FIRST_DELAY", 0.001)
    monkeypatch.setattr(steady, "MAX_DELAY", 0.001)


def test_a_lost_connection_is_tried_again_until_it_answers() -> None:
    calls: list[int] = []

    async def call() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise failure(psycopg.OperationalError("the database system is shutting down"))
        return "row"

    connector = SteadyConnector(conninfo="postgresql://unused", patience=5.0)
    assert asyncio.run(connector._again("a query", call)) == "row"
    assert len(calls) == 3


def test_it_gives_up_after_its_patience() -> None:
    async def call() -> Any:
        raise failure(psycopg.OperationalError("connection refused"))

    connector = SteadyConnector(conninfo="postgresql://unused", patience=0.05)
    with pytest.raises(exceptions.ConnectorException):
        asyncio.run(connector._again("a query", call))


def test_an_error_of_the_query_is_not_repeated() -> None:
    calls: list[int] = []

    async def call() -> Any:
        calls.append(1)
        raise failure(psycopg.errors.UndefinedFunction("no such function"))

    connector = SteadyConnector(conninfo="postgresql://unused", patience=5.0)
    with pytest.raises(exceptions.ConnectorException):
        asyncio.run(connector._again("a query", call))
    assert calls == [1]
