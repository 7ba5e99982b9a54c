"""The registry's index on the shared database: two Registry objects on one database, each
with its own engine (as two processes, or two machines, have) and, where the folders are
beside the point, its own root.  The races are forced, not hoped for: the second process acts
in the window between what the first resolved and its transaction."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skill_executor.db import Database
from skill_executor.errors import Conflict, NotFound
from skill_executor.registry import store as store_module
from skill_executor.registry.store import Registry, Version


def write_skill(folder: Path, name: str, data: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "SKILL.md").write_text(f"---\nname: {name}\ndescription: Shared.\n---\n# {name}\n")
    (folder / "data.txt").write_text(data)
    return folder


@pytest.fixture
def two(tmp_path: Path, database: Database) -> Iterator[tuple[Registry, Registry]]:
    """Registry A and B: one database, two engines, two roots (two machines)."""
    other = Database(database.url.render_as_string(hide_password=False))
    yield Registry(tmp_path / "a", database=database), Registry(tmp_path / "b", database=other)
    other.close()


def test_two_processes_publishing_one_skill_never_share_a_number(
    tmp_path: Path, two: tuple[Registry, Registry]
) -> None:
    a, b = two
    sources = [write_skill(tmp_path / f"src{i}" / "busy", "busy", f"content {i}") for i in range(10)]
    numbers: list[int] = []
    errors: list[BaseException] = []
    start = threading.Barrier(10)

    def publish(i: int) -> None:
        try:
            start.wait()
            numbers.append((a if i % 2 else b).publish("busy", sources[i], actor=f"ci{i}")[0].number)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=publish, args=(i,)) for i in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(numbers) == list(range(1, 11))
    assert [v.number for v in a.versions("busy")] == list(range(1, 11))
    assert a.pointers("busy") == b.pointers("busy") == (10, 10)
    # the audit log's order (its id) is the order the numbers were given in
    published = [e.version for e in reversed(b.audit("busy")) if e.action == "publish"]
    assert published == list(range(1, 11))


def test_the_same_content_from_two_processes_is_one_version(tmp_path: Path, two: tuple[Registry, Registry]) -> None:
    a, b = two
    source = write_skill(tmp_path / "src" / "same", "same", "one")
    first, created = a.publish("same", source, actor="ci")
    again, created_again = b.publish("same", source, actor="ci")
    assert (created, created_again) == (True, False)
    assert again.number == first.number == 1 and again.digest == first.digest


def _after_resolving(monkeypatch: pytest.MonkeyPatch, registry: Registry, name: str, meanwhile: Any) -> list[bool]:
    """Make ``registry.<name>`` (a lookup its writer does before its transaction) run
    ``meanwhile`` right after it answers, once: another process acting in the window."""
    original = getattr(registry, name)
    ran: list[bool] = []

    def racing(*args: Any, **kwargs: Any) -> Any:
        found = original(*args, **kwargs)
        if not ran:
            ran.append(True)
            meanwhile()
        return found

    monkeypatch.setattr(registry, name, racing)
    return ran


def test_a_default_another_process_sets_meanwhile_is_never_deleted(
    tmp_path: Path, two: tuple[Registry, Registry], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = two
    source = write_skill(tmp_path / "src" / "pin", "pin", "one")
    a.publish("pin", source, actor="ci")
    (source / "data.txt").write_text("two")
    a.publish("pin", source, actor="ci")
    a.set_default("pin", 1, actor="ops")
    # A resolves version 2 (not the default); B then makes it the default, before A deletes
    ran = _after_resolving(monkeypatch, a, "version", lambda: b.set_default("pin", 2, actor="ops"))
    with pytest.raises(Conflict) as refused:
        a.delete_version("pin", 2, actor="attacker")
    assert ran and refused.value.code == "version_is_default"
    assert a.pointers("pin") == (2, 2)
    assert a.version("pin").number == 2 and (a.folder(a.version("pin")) / "data.txt").read_text() == "two"
    assert [e.action for e in a.audit("pin")][0] == "set_default"  # no delete was logged


def test_a_version_another_process_deleted_meanwhile_is_a_404_logged_once(
    tmp_path: Path, two: tuple[Registry, Registry], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = two
    source = write_skill(tmp_path / "src" / "twice", "twice", "one")
    a.publish("twice", source, actor="ci")
    (source / "data.txt").write_text("two")
    a.publish("twice", source, actor="ci")
    _after_resolving(monkeypatch, a, "version", lambda: b.delete_version("twice", 1, actor="b"))
    with pytest.raises(NotFound) as gone:
        a.delete_version("twice", 1, actor="a")
    assert gone.value.code == "version_not_found"
    assert [(e.action, e.actor) for e in a.audit("twice") if e.action == "delete_version"] == [("delete_version", "b")]
    assert a.pointers("twice") == (2, 2) and [v.number for v in a.versions("twice")] == [2]


def test_deleting_a_skill_while_another_process_publishes_leaves_no_pointer_at_nothing(
    tmp_path: Path, two: tuple[Registry, Registry], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = two
    source = write_skill(tmp_path / "src" / "race", "race", "one")
    a.publish("race", source, actor="ci")
    (source / "data.txt").write_text("two")
    a.publish("race", source, actor="ci")
    newer = write_skill(tmp_path / "other" / "race", "race", "three")
    # A lists versions 1 and 2 to delete; B publishes version 3 before A's transaction
    _after_resolving(monkeypatch, a, "versions", lambda: b.publish("race", newer, actor="b", set_default=False))
    deleted = a.delete_skill("race", actor="a")
    assert [v.number for v in deleted] == [1, 2]
    assert a.pointers("race") == b.pointers("race") == (3, 3)  # not the deleted 2
    assert not a.default_held("race")
    assert b.version("race").number == 3 and (b.folder(b.version("race")) / "data.txt").read_text() == "three"


def test_a_pin_another_process_makes_while_a_folder_is_staged_holds(
    tmp_path: Path, two: tuple[Registry, Registry], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = two
    folder = write_skill(tmp_path / "skills" / "live", "live", "one")
    a.observe("live", folder)
    (folder / "data.txt").write_text("two")
    a.observe("live", folder)
    assert a.pointers("live") == (2, 2)
    (folder / "data.txt").write_text("three")
    materialise = store_module.materialise
    pinned: list[Version] = []

    def pin_meanwhile(*args: Any, **kwargs: Any) -> Any:
        files = materialise(*args, **kwargs)
        if not pinned:
            pinned.append(b.set_default("live", 1, actor="ops"))  # a rollback, held
        return files

    monkeypatch.setattr(store_module, "materialise", pin_meanwhile)
    third = a.observe("live", folder)
    assert pinned and third.number == 3 and not third.is_default and third.is_latest
    assert a.pointers("live") == (1, 3) and a.default_held("live")


def test_the_old_index_file_is_left_alone(tmp_path: Path, database: Database) -> None:
    """The legacy index is imported by the database layer, never removed by the store."""
    (tmp_path / "registry").mkdir()
    legacy = tmp_path / "registry" / "index.db"
    legacy.write_bytes(b"SQLite format 3\x00 the old index")
    registry = Registry(tmp_path / "registry", database=database)
    registry.publish("kept", write_skill(tmp_path / "src" / "kept", "kept", "one"), actor="ci")
    assert legacy.read_bytes() == b"SQLite format 3\x00 the old index"


def _replica(tmp_path: Path, name: str, url: str, objects: Any) -> Any:
    from skill_executor.registry.repository import SkillRepository

    registry = Registry(tmp_path / name / "registry", database=Database(url), objects=objects)
    return SkillRepository([], install_root=tmp_path / name / "installed", registry=registry, refresh_interval=60)


def test_a_skill_deleted_through_one_replica_is_gone_on_another_at_once(tmp_path: Path, database: Database) -> None:
    """Replica A installed it, B deleted it: A's next request for it (before A rescans) is a
    404 and A's copy goes; the stale copy is never published again as a new version."""
    from skill_executor.objects.local import LocalObjectStore

    from ..service.test_registry_uploads import as_zip

    url = database.url.render_as_string(hide_password=False)
    objects = LocalObjectStore(tmp_path / "objects")
    a, b = _replica(tmp_path, "a", url, objects), _replica(tmp_path, "b", url, objects)
    files = {"victim/SKILL.md": b"---\nname: victim\ndescription: d\n---\n# v\n", "victim/run.sh": b"echo 1\n"}
    a.install(as_zip(files))
    assert a.get("victim").version == 1 and b.get("victim").version == 1  # B lists it, installed through A
    b.remove("victim")
    for replica in (a, b):
        with pytest.raises(NotFound) as caught:
            replica.get("victim")
        assert caught.value.code == "skill_not_found"
    assert not (tmp_path / "a" / "installed" / "victim").exists()
    assert a.registry.versions("victim") == []  # nothing published again
    a.reload()
    b.reload()
    assert "victim" not in [s.id for s in a.list()] + [s.id for s in b.list()]
    a.install(as_zip(files))  # installed again: a new number, listed by both
    assert a.get("victim").version == 2 and b.reload() and b.get("victim").version == 2
