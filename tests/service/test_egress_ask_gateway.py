"""Approvals for new hosts at the gateway (a grant with ``ask``), on the real mitmproxy gateway
and a loopback HTTPS upstream: a request to a host outside the allow-list is held and asked
about over the control channel (one question per host, whatever the number of requests), the
gateway's other requests go on meanwhile, an approval lets it (and the run's later requests to
the host) through, a refusal is the 403 naming the rule and why, and a revoke or a lost answer
never leaves a request hanging."""

from __future__ import annotations

import base64
import concurrent.futures
import dataclasses
import queue
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skill_executor import egress
from skill_executor.config import Settings

from .test_egress_gateway import NAMES, Upstream, egress_python, make_grant, make_upstream_certs, serve_https

pytestmark = pytest.mark.skipif(
    egress_python() is None, reason="no egress environment (scripts/test.sh makes .venv-egress)"
)

ASK_TIMEOUT = 1.0


class Env:
    def __init__(self, gateway: egress.Gateway, folder: Path) -> None:
        self.gateway = gateway
        self.folder = folder
        self.questions: queue.SimpleQueue[egress.HostQuestion] = queue.SimpleQueue()
        self.events: queue.SimpleQueue[egress.EgressEvent] = queue.SimpleQueue()
        self.runs = 0

    def grant(self, **block: Any) -> tuple[str, str]:
        """A fresh run with ``block`` as its rule's egress, its questions and events watched here."""
        self.runs += 1
        run_id = f"ask-run-{self.runs}"
        grant = make_grant(run_id, "asking", **block)
        self.gateway.watch(run_id, self.events.put, self.questions.put)
        return run_id, self.gateway.grant(grant)

    def curl(self, token: str, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            ["curl", "-sS", "--max-time", "30", "--proxy", self.gateway.proxy_url(token)]
            + ["--cacert", str(self.gateway.ca_cert), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )


POOL = concurrent.futures.ThreadPoolExecutor(8)


def connect(env: Env, token: str, target: str) -> concurrent.futures.Future[str]:
    """A CONNECT on a raw socket, in the background: the gateway's answer (status line and body)."""

    def call() -> str:
        with socket.create_connection(("127.0.0.1", env.gateway.port), timeout=30) as sock:
            auth = base64.b64encode(f"run:{token}".encode()).decode()
            sock.sendall(
                f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\nProxy-Authorization: Basic {auth}\r\n\r\n".encode()
            )
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
                if b"\r\n\r\n" in data and data.split(b"\r\n\r\n", 1)[1].endswith(b"\n"):
                    break
                if data.startswith(b"HTTP/1.1 200"):
                    break
            return data.decode()

    return POOL.submit(call)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    folder = tmp_path_factory.mktemp("egress-ask")
    upstream_ca, upstream_pem = make_upstream_certs(folder)
    server = serve_https(Upstream, upstream_pem)
    port = server.server_address[1]
    settings = Settings(
        data_dir=folder / "data",
        egress_python=egress_python(),
        egress_ca_bundle=upstream_ca,
        egress_hosts={name: f"127.0.0.1:{port}" for name in [*NAMES, "plain.example.test"]},
        egress_ask_timeout_seconds=ASK_TIMEOUT,
    )
    gateway = egress.start(settings)
    yield Env(gateway, folder)
    gateway.close()
    server.shutdown()


def question(env: Env) -> egress.HostQuestion:
    return env.questions.get(timeout=10)


def test_a_held_host_waits_for_its_answer_while_other_requests_go_on(env: Env) -> None:
    run_id, token = env.grant(allow=["api.example.test"], ask=True)
    held = [env.curl(token, f"https://other.example.test/held/{i}") for i in range(3)]
    asked = question(env)
    assert (asked.run_id, asked.rule, asked.host, asked.method) == (run_id, "asking", "other.example.test", "CONNECT")
    time.sleep(0.3)
    assert env.questions.empty()  # one question for the host, however many requests wait on it
    # the gateway's loop is not blocked: an allowed request of the same run goes through meanwhile
    allowed = env.curl(token, "https://api.example.test/meanwhile")
    out, _ = allowed.communicate(timeout=20)
    assert '"path": "/meanwhile"' in out, out
    assert all(p.poll() is None for p in held)
    env.gateway.answer(asked, True)
    for i, process in enumerate(held):
        out, _ = process.communicate(timeout=20)
        assert f'"path": "/held/{i}"' in out, out
    # approved for the rest of the run: asked no more
    again = env.curl(token, "https://other.example.test/again")
    assert '"path": "/again"' in again.communicate(timeout=20)[0]
    assert env.questions.empty()


def test_a_refused_host_is_a_403_naming_the_rule_and_is_not_asked_again(env: Env) -> None:
    _, token = env.grant(allow=["api.example.test"], ask=True)
    held = connect(env, token, "files.example.test:443")
    asked = question(env)
    env.gateway.answer(asked, False, "rejected by key k1: not this one")
    out = held.result(timeout=20)
    assert out.startswith("HTTP/1.1 403")
    assert (
        "skill-executor egress: files.example.test is not in the allow-list and was not approved: "
        "rejected by key k1: not this one (rule 'asking')"
    ) in out
    assert "was not approved" in connect(env, token, "files.example.test:443").result(timeout=20)
    assert env.questions.empty()


def test_an_answer_naming_another_run_or_host_approves_nothing(env: Env) -> None:
    """An answer carries the question's run and host: one meant for another question (an earlier
    gateway process's, whose ids a restart would reuse) leaves this one waiting."""
    run_id, token = env.grant(allow=["api.example.test"], ask=True)
    held = connect(env, token, "files.example.test:443")
    asked = question(env)
    for stray in (
        dataclasses.replace(asked, run_id="another-run"),
        dataclasses.replace(asked, host="other.example.test"),
    ):
        env.gateway.answer(stray, True)
    time.sleep(0.3)
    assert not held.done()
    env.gateway.answer(asked, False, "no")
    assert held.result(timeout=20).startswith("HTTP/1.1 403")


def test_plain_http_requests_are_held_too(env: Env) -> None:
    _, token = env.grant(allow=["api.example.test"], ask=True)
    held = env.curl(token, "-i", "http://plain.example.test/p")
    asked = question(env)
    assert (asked.host, asked.method) == ("plain.example.test", "GET")
    env.gateway.answer(asked, False, "no")
    assert "was not approved: no (rule 'asking')" in held.communicate(timeout=20)[0]


def test_addresses_and_grants_without_ask_are_never_asked_about(env: Env) -> None:
    _, token = env.grant(allow=["api.example.test"], ask=True)
    assert "127.0.0.1 is an IP address not listed" in connect(env, token, "127.0.0.1:443").result(timeout=20)
    _, plain = env.grant(allow=["api.example.test"])
    refused = connect(env, plain, "other.example.test:443").result(timeout=20)
    assert "other.example.test is not in the allow-list (rule 'asking')" in refused
    time.sleep(0.2)
    assert env.questions.empty()


def test_a_revoke_or_a_lost_answer_never_leaves_a_request_hanging(env: Env) -> None:
    _, token = env.grant(allow=["api.example.test"], ask=True)
    held = connect(env, token, "other.example.test:443")
    question(env)
    env.gateway.revoke(token)
    assert "was not approved: the run has ended" in held.result(timeout=20)
    # no answer at all: the gateway's own bound (the service's timeout and a grace) refuses it
    _, token = env.grant(allow=["api.example.test"], ask=True)
    started = time.monotonic()
    lost = connect(env, token, "other.example.test:443")
    question(env)
    assert "was not approved: no answer came" in lost.result(timeout=30)
    assert time.monotonic() - started >= ASK_TIMEOUT


def test_a_question_for_a_run_nobody_watches_is_refused_at_once(env: Env) -> None:
    grant = make_grant("unwatched", "asking", allow=["api.example.test"], ask=True)
    token = env.gateway.grant(grant)
    out = connect(env, token, "other.example.test:443").result(timeout=20)
    assert "was not approved: approvals for new hosts are not available here (rule 'asking')" in out
