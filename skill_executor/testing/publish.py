"""What a test run may change on a service (``--publish``, ``--skill-executor-publish``).

Testing a skill folder on a service means uploading it there, and an upload is visible:
the service's overview and search show an installed skill's latest upload at once, and
it makes a new skill's first version its default. A pull request's CI must change
nothing that is live, so a run uploads nothing unless asked (see
:class:`~skill_executor.testing.backends.ServerBackend` for what each mode does).
"""

from __future__ import annotations

from typing import Literal

from ..errors import ExecutorError

#: None (the default): nothing is uploaded.
Publish = Literal["existing", "any"]
PUBLISH_MODES: tuple[str, ...] = ("existing", "any")


class PublishRefused(ExecutorError):
    """An upload this run was not allowed to make. Codes: ``publish_not_allowed`` (no
    ``--publish``), ``skill_not_on_server`` (``existing``, and the service has no such skill
    with a default), ``default_moved`` (the default changed during the upload)."""

    status = 409
