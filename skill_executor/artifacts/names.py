"""Artifact names, refs and file ids: names are path-like segments of
``[A-Za-z0-9._+-]`` (no ``..``, at most :data:`NAME_MAX` characters), a ref is
``name[@version]``, and a file id names one version without its name in clear
(``file-<name, base64url>.<version>.<tag>``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re

from ..errors import BadRequest, ExecutorError, NotFound

NAME_MAX = 255
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._+-]*(/[A-Za-z0-9_][A-Za-z0-9._+-]*)*$")

#: ``file-<name, base64url>.<version>.<tag>``: a version of an artifact, named without its name.
FILE_ID_PREFIX = "file-"
_FILE_ID = re.compile(r"^file-([A-Za-z0-9_-]{1,400})\.([1-9][0-9]{0,18})\.([0-9a-f]{20})$")


def file_id(owner: str, name: str, version: int, sha256: str) -> str:
    """The id of one artifact version: its name and number, and a tag over its owner, name,
    number and content.  An id is only ever looked up among the caller's own artifacts, and
    the tag makes another key's id (or an id of a version deleted and saved again with
    other content) match nothing there: 404, never a leak."""
    encoded = base64.urlsafe_b64encode(name.encode()).decode().rstrip("=")
    tag = hashlib.sha256(f"{owner}\0{name}\0{version}\0{sha256}".encode()).hexdigest()[:20]
    return f"{FILE_ID_PREFIX}{encoded}.{version}.{tag}"


def parse_file_id(value: str) -> tuple[str, int]:
    """(name, version) a file id names; 404 ``file_not_found`` for anything else."""
    missing = NotFound(f"no file {value[:500]!r}", code="file_not_found")
    match = _FILE_ID.match(value)
    if match is None:
        raise missing
    encoded, version, _ = match.groups()
    try:
        name = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
        validate_name(name)
    except (binascii.Error, UnicodeDecodeError, ValueError, ExecutorError):
        raise missing from None
    return name, int(version)


def validate_name(name: str) -> str:
    """Artifact names: path-like segments of ``[A-Za-z0-9._+-]``, no ``..``, <= 255 chars."""
    if not name or len(name) > NAME_MAX or not _NAME.match(name) or ".." in name.split("/"):
        raise BadRequest(
            f"invalid artifact name {name!r}: use 1-{NAME_MAX} characters of letters, digits, "
            "'.', '_', '+', '-' in '/'-separated segments (no '..', no leading '/')",
            code="invalid_artifact_name",
        )
    return name


def parse_ref(ref: str) -> tuple[str, int | None]:
    """``name[@version]`` (without the ``artifact://`` scheme) -> (name, version)."""
    name, sep, version = ref.rpartition("@")
    if not sep:
        return validate_name(ref), None
    if not version.isdigit() or int(version) < 1:
        raise BadRequest(f"invalid artifact version {version!r} in {ref!r}", code="invalid_artifact_ref")
    return validate_name(name), int(version)
