"""The runner image's warm HOME, on the host: what every run's HOME starts with.

The full image bakes, at build, what a long-lived container has after its first uses
(``/opt/skill-executor/warm/home``: matplotlib's font cache, a LibreOffice user profile).
:func:`warm_home` copies it out of the image once per image (a container created, never
started; its archive read, unpacked with tarfile's ``data`` filter) into
``<data_dir>/warm/<image id>/home``, and the workspaces copy it into each run's HOME
(:meth:`~skill_executor.workspace.layout.WorkspaceManager.create_root`).  An image without it
(the minimal flavour, an image of one's own) gives None: HOMEs start empty, as before.
"""

from __future__ import annotations

import io
import logging
import os
import shutil
import tarfile
import tempfile
from pathlib import Path

import docker

#: Where the image keeps its warm HOME.
IMAGE_WARM_HOME = "/opt/skill-executor/warm/home"
#: The most the archive may hold (the warm HOME is a few hundred KiB).
MAX_ARCHIVE_BYTES = 64 << 20

log = logging.getLogger(__name__)


def warm_home(client: docker.DockerClient, image: str, cache: Path) -> Path | None:
    """The image's warm HOME unpacked under ``cache`` (once per image id), or None."""
    try:
        image_id = str(client.api.inspect_image(image)["Id"]).removeprefix("sha256:")[:32]
    except docker.errors.APIError as exc:
        log.warning("the runner image's warm HOME is not used: %s", exc)
        return None
    home = cache / image_id / "home"
    if home.is_dir():
        return home
    container = client.api.create_container(image, command=["true"], network_disabled=True)["Id"]
    try:
        stream, _ = client.api.get_archive(container, IMAGE_WARM_HOME)
        data = bytearray()
        for chunk in stream:
            data += chunk
            if len(data) > MAX_ARCHIVE_BYTES:
                log.warning("the runner image's warm HOME is larger than %d bytes: not used", MAX_ARCHIVE_BYTES)
                return None
    except docker.errors.NotFound:
        return None  # an image without one
    except docker.errors.APIError as exc:
        log.warning("the runner image's warm HOME could not be read: %s", exc)
        return None
    finally:
        client.api.remove_container(container, force=True)
    (cache / image_id).mkdir(parents=True, exist_ok=True)
    unpacked = Path(tempfile.mkdtemp(prefix=".home-", dir=cache / image_id))
    try:
        with tarfile.open(fileobj=io.BytesIO(bytes(data)), mode="r:") as archive:
            _unpack(archive, unpacked)
        try:
            os.rename(unpacked / "home", home)  # one step: another process may have won
        except OSError:
            if not home.is_dir():
                raise
    finally:
        shutil.rmtree(unpacked, ignore_errors=True)
    return home


def _unpack(archive: tarfile.TarFile, into: Path) -> None:
    """Folders and regular files only, at plain relative paths (no links, no devices, no
    ``..``), modes without set-id bits: tarfile's ``data`` filter, which Python 3.11.2 lacks."""
    for member in archive:
        parts = member.name.split("/")
        if member.name.startswith("/") or any(part in ("", ".", "..") for part in parts):
            continue
        target = into.joinpath(*parts)
        if member.isdir():
            target.mkdir(mode=0o755, parents=True, exist_ok=True)
        elif member.isfile():
            target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
            source = archive.extractfile(member)
            if source is None:
                continue
            with source, open(target, "xb") as out:
                shutil.copyfileobj(source, out)
            os.chmod(target, member.mode & 0o755 | 0o600)
