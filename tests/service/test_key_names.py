"""API keys by name: SKILL_EXECUTOR_API_KEYS_FILE's ``KEY [admin] [name=NAME]`` lines, and a
command policy's rules naming a key by its name as well as by its id -- on the real service."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from skill_executor.access import KeyEntry, key_id, key_names, read_keys_file
from skill_executor.errors import ExecutorError
from skill_executor.policy import parse_policy

from ..api_server import Server
from ..conftest import require_runtime

CI_KEY = "ci-pipeline-secret"
PERSON_KEY = "a-person-secret"
ADMIN_KEY = "an-admin-secret"
KEYS = f"""# the service's keys
{CI_KEY} name=ci
{PERSON_KEY}   # no name: rules use its id
{ADMIN_KEY} admin name=ops
"""
POLICY = """
rules:
  - name: ci-runs-python-only
    key: ci
    skill: "*"
    allow: [python3, echo]
"""


def test_the_keys_file_gives_keys_names(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text(KEYS)
    assert read_keys_file(keys) == [
        KeyEntry(CI_KEY, False, "ci"),
        KeyEntry(PERSON_KEY, False, None),
        KeyEntry(ADMIN_KEY, True, "ops"),
    ]
    assert key_names(keys) == {key_id(CI_KEY): "ci", key_id(ADMIN_KEY): "ops"}
    assert key_names(None) == {}


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("k name=Upper", "'Upper' is not a key name (a-z, 0-9, . _ -; at most 64)"),
        ("k name=", "'' is not a key name (a-z, 0-9, . _ -; at most 64)"),
        ("k1 name=ci\nk2 name=ci", "'ci' is used twice"),
    ],
)
def test_a_bad_key_name_is_refused_with_its_line(tmp_path: Path, line: str, problem: str) -> None:
    keys = tmp_path / "keys"
    keys.write_text(line + "\n")
    with pytest.raises(ExecutorError) as info:
        read_keys_file(keys)
    number = line.count("\n") + 1
    assert info.value.code == "invalid_keys_file"
    assert info.value.message == f"keys file {keys}, line {number}: {problem}"


def test_a_rule_names_a_key_by_its_name_or_its_id() -> None:
    names = {key_id(CI_KEY): "ci"}
    by_name = parse_policy(POLICY, names=names)
    assert by_name.rule(key_id(CI_KEY), "math-tools") is not None
    assert by_name.rule(key_id(PERSON_KEY), "math-tools") is None  # another key: no rule
    by_id = parse_policy(POLICY.replace("key: ci", f"key: {key_id(CI_KEY)}"), names=names)
    assert by_id.rule(key_id(CI_KEY), "math-tools") is not None
    assert parse_policy(POLICY).rule(key_id(CI_KEY), "math-tools") is None  # no names known


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    require_runtime("docker")
    base = tmp_path_factory.mktemp("key-names")
    (base / "keys").write_text(KEYS)
    (base / "policy.yaml").write_text(POLICY)
    srv = Server(
        base,
        env={
            "SKILL_EXECUTOR_API_KEYS_FILE": str(base / "keys"),
            "SKILL_EXECUTOR_POLICY_FILE": str(base / "policy.yaml"),
            "SKILL_EXECUTOR_POOL_SIZE": "0",
        },
    ).start()
    yield srv
    srv.stop()


def post_run(server: Server, key: str, command: str) -> httpx.Response:
    return httpx.post(
        f"{server.url}/v1/runs",
        json={"skill": "math-tools", "command": command},
        headers={"Authorization": f"Bearer {key}"},
        timeout=120,
    )


def test_the_service_applies_a_rule_to_the_key_it_names(server: Server) -> None:
    refused = post_run(server, CI_KEY, "echo hi; ls")
    assert refused.status_code == 403, refused.text
    error = refused.json()["error"]
    assert error["code"] == "command_denied" and error["details"]["rule"] == "ci-runs-python-only"
    assert error["details"]["program"] == "ls"
    allowed = post_run(server, CI_KEY, "echo hi")
    assert allowed.status_code == 200 and allowed.json()["stdout"] == "hi\n"
    other = post_run(server, PERSON_KEY, "echo hi; ls >/dev/null && echo listed")  # no rule for it
    assert other.status_code == 200 and other.json()["stdout"] == "hi\nlisted\n"
