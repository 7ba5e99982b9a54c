"""``skill-executor artifacts``: the artifact store, on its database and object store directly.

Whoever can read the store's database and files is an admin: the commands act on the local
tenant's artifacts (what the service uses with no keys), or ``--owner``'s.  Reading a
store that was never written (``list``, ``get``, ``delete``) finds nothing and creates
nothing; only ``put`` creates the data dir.
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from ..config import Settings
from ..errors import BadRequest

if TYPE_CHECKING:
    from ..artifacts.store import ArtifactInfo, LocalArtifactStore


def register(groups: Any) -> None:
    artifacts = groups.add_parser("artifacts", help="the artifact store")
    sub = artifacts.add_subparsers(dest="command", required=True, metavar="SUBCOMMAND")
    put = sub.add_parser("put", help="save FILE (or - for stdin) as a new version of NAME")
    put.add_argument("name")
    put.add_argument("file")
    put.add_argument(
        "--mime-type",
        default=None,
        help="the MIME type to keep (default: sniffed from the content and NAME, as run outputs are typed)",
    )
    get = sub.add_parser("get", help="write NAME[@VERSION] to stdout or --output")
    get.add_argument("ref")
    get.add_argument("--output", "-o")
    list_ = sub.add_parser("list", help="list artifacts, or the versions of NAME")
    list_.add_argument("name", nargs="?")
    delete = sub.add_parser("delete", help="delete NAME (every version) or NAME@VERSION; prints what was deleted")
    delete.add_argument("ref")
    for parser in (put, get, list_, delete):
        parser.add_argument("--data-dir", type=Path)
        parser.add_argument(
            "--owner",
            default=None,
            metavar="KEY_ID",
            help="the tenant (API key id, as in the logs) whose artifacts to use; default: the local tenant "
            "(what the service uses when no keys are configured)",
        )
        parser.set_defaults(handler=_artifacts)


def _artifacts(args: argparse.Namespace) -> int:
    from ..access import LOCAL_TENANT, check_tenant
    from ..artifacts.store import LocalArtifactStore

    settings = Settings(**({"data_dir": args.data_dir} if args.data_dir else {}))
    tenant = check_tenant(args.owner) if args.owner else LOCAL_TENANT
    reading = args.command != "put"
    if reading and not _database_exists(settings):
        return _nothing_saved(args)  # and nothing created: no database file, no data dir
    from ..core import open_database

    database = open_database(settings)
    try:
        if reading and not LocalArtifactStore.exists(database):
            return _nothing_saved(args)
        from ..objects import open_object_store

        store = LocalArtifactStore.from_settings(settings, database=database, objects=open_object_store(settings))
        return _run(args, store, tenant)
    finally:
        database.close()


def _database_exists(settings: Settings) -> bool:
    """Whether the configured database may hold artifacts: a server database always; the
    embedded SQLite file once it exists (or the artifact store's file from before the shared
    database, which opening the database imports)."""
    from ..db.url import parse

    url = parse(settings.database)
    if url.get_backend_name() != "sqlite":
        return True
    return Path(url.database or "").is_file() or (settings.artifacts_dir / "artifacts.db").is_file()


def _nothing_saved(args: argparse.Namespace) -> int:
    """What reading a store that never saved anything answers: an empty list, or not found."""
    from ..artifacts.names import parse_ref, validate_name
    from ..errors import NotFound

    if args.command == "list" and args.name is None:
        print(json.dumps([]))
        return 0
    name = validate_name(args.name) if args.command == "list" else parse_ref(args.ref.removeprefix("artifact://"))[0]
    raise NotFound(f"no artifact {name!r}", code="artifact_not_found")


def _run(args: argparse.Namespace, store: LocalArtifactStore, tenant: str) -> int:
    from ..artifacts.names import parse_ref

    if args.command == "put":
        if args.file == "-":
            info = _put(store, args.name, sys.stdin.buffer, args.mime_type, tenant)
        else:
            try:
                source = open(args.file, "rb")  # noqa: SIM115 - closed below; open errors are refusals
            except OSError as exc:
                raise BadRequest(f"cannot read {args.file}: {exc.strerror}") from None
            with source:
                info = _put(store, args.name, source, args.mime_type, tenant)
        print(json.dumps(info.to_dict()))
    elif args.command == "get":
        name, version = parse_ref(args.ref.removeprefix("artifact://"))
        info = store.info(name, version, tenant=tenant)
        with store.open(info) as handle:
            if args.output:
                with open(args.output, "wb") as out:
                    shutil.copyfileobj(handle, out)
            else:
                shutil.copyfileobj(handle, sys.stdout.buffer)
    elif args.command == "delete":
        name, version = parse_ref(args.ref.removeprefix("artifact://"))
        print(json.dumps([row.to_dict() for row in store.delete(name, version, tenant=tenant)], indent=2))
    else:
        rows = store.versions(args.name, tenant=tenant) if args.name else store.names(tenant=tenant)
        print(json.dumps([row.to_dict() for row in rows], indent=2))
    return 0


_SNIFF = 8192


def _put(store: LocalArtifactStore, name: str, source: BinaryIO, mime_type: str | None, tenant: str) -> ArtifactInfo:
    """Save ``source``; with no ``mime_type``, typed by its first bytes and ``name`` (as outputs are)."""
    if mime_type is not None:
        return store.put(name, source, mime_type=mime_type, tenant=tenant)
    from ..outputs.mime import detect

    head = b""
    while len(head) < _SNIFF and (chunk := source.read(_SNIFF - len(head))):
        head += chunk
    rest = source.read(1) if len(head) == _SNIFF else b""
    mime = detect(name, head, complete=not rest)
    return store.put(
        name, itertools.chain((head + rest,), iter(lambda: source.read(256 * 1024), b"")), mime_type=mime, tenant=tenant
    )
