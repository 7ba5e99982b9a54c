"""What the runner image already provides, and the environment key for the rest.

A skill runs on a Python tier (:func:`choose_tier`): the default one (CPython 3.11, Debian
bookworm) unless a ``requires-python`` it declares excludes that Python, then the oldest
tier the service offers that meets them all.  Python needs are judged for the tier's
interpreter (on Linux x86_64): a requirement whose markers are false there is no need at
all, and one whose specifier accepts the version the tier's image pins
(``images/runner/requirements-full.txt``; the other tiers: ``requirements-minimal.txt``
and ``requirements-tier.txt``) is *provided by the image*.  npm needs are provided when
the image's ``npm/package.json`` pins a version the range accepts.  The key of what is
left hashes the remaining needs, the tier's Python tag and pins, and the configured
package sources.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.markers import Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ..errors import ExecutorError
from ..image.inputs import DEFAULT_TIER, PythonTier, read_pins
from .declared import DependenciesUnmet, Needs
from .hosttools import redact_url, url_secrets

log = logging.getLogger(__name__)


#: The Python tag environments are built for on the default tier.
TARGET = DEFAULT_TIER.target


def markers(tier: PythonTier) -> dict[str, str]:
    """The marker environment of a tier's Python."""
    return {
        "python_version": tier.name,
        "python_full_version": tier.python,
        "implementation_name": "cpython",
        "implementation_version": tier.python,
        "platform_python_implementation": "CPython",
        "os_name": "posix",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": "x86_64",
        "platform_release": "",
        "platform_version": "",
        "extra": "",
    }


#: The marker environment of the default tier's Python.
IMAGE_MARKERS: dict[str, str] = markers(DEFAULT_TIER)


def choose_tier(needs: Needs, offered: Sequence[PythonTier]) -> PythonTier:
    """The tier a skill runs on: the first of ``offered`` (the default) when its Python
    meets every ``requires-python`` the skill declares, else the oldest that does;
    ``DependenciesUnmet`` naming each unmet specifier when none does."""
    if not needs.requires_python:
        return offered[0]

    def meets(tier: PythonTier) -> bool:
        return all(SpecifierSet(spec).contains(tier.python, prereleases=True) for _, spec in needs.requires_python)

    if meets(offered[0]):
        return offered[0]
    for tier in sorted(offered[1:], key=lambda t: t.version):
        if meets(tier):
            return tier
    pythons = " and ".join(tier.python for tier in offered)
    unmet = [
        {
            "source": source,
            "need": f"python{spec}",
            "error": f"requires Python {spec}; this service's sandboxes have Python {pythons}",
        }
        for source, spec in needs.requires_python
        if not any(SpecifierSet(spec).contains(tier.python, prereleases=True) for tier in offered)
    ] or [
        {
            "source": ", ".join(source for source, _ in needs.requires_python),
            "need": "python" + ",".join(spec for _, spec in needs.requires_python),
            "error": f"no one Python meets all of them; this service's sandboxes have Python {pythons}",
        }
    ]
    names = ", ".join(item["need"] for item in unmet)
    raise DependenciesUnmet(f"the skill's dependencies cannot be met: {names}", details={"unmet": unmet})


def npm_version(text: str) -> tuple[int, int, int] | None:
    match = re.fullmatch(r"v?(\d+)\.(\d+)\.(\d+)(?:[-+].*)?", text.strip())
    return (int(match.group(1)), int(match.group(2)), int(match.group(3))) if match else None


def _partial(text: str) -> tuple[list[int], bool] | None:
    """``1``, ``1.2``, ``1.x``, ``1.2.3`` -> (numbers given, had a wildcard)."""
    parts = text.strip().lstrip("v=").split(".")
    numbers: list[int] = []
    for part in parts[:3]:
        part = re.split(r"[-+]", part, maxsplit=1)[0]
        if part in ("x", "X", "*"):
            return numbers, True
        if not part.isdigit():
            return None
        numbers.append(int(part))
    return numbers, False


def _comparator(comp: str, version: tuple[int, int, int]) -> bool | None:
    """One npm comparator (``^1.2``, ``~1.2.3``, ``>=1``, ``1.x``, ``1.2.3``); None: not understood."""
    match = re.fullmatch(r"(\^|~|>=|<=|>|<|=)?\s*(.+)", comp)
    if not match:
        return None
    op, rest = match.group(1) or "", match.group(2)
    parsed = _partial(rest)
    if parsed is None:
        return None
    numbers, _ = parsed
    if not numbers:
        return True
    padded = tuple([*numbers, 0, 0, 0][:3])
    if op in ("", "="):
        return list(version[: len(numbers)]) == numbers
    if op == "^":
        first = next((i for i, n in enumerate(numbers) if n != 0), len(numbers) - 1)
        return version >= padded and list(version[: first + 1]) == numbers[: first + 1]
    if op == "~":
        keep = 2 if len(numbers) >= 2 else 1
        return version >= padded and list(version[:keep]) == numbers[:keep]
    ops = {">=": version >= padded, ">": version > padded, "<=": version <= padded, "<": version < padded}
    return ops[op]


def npm_range_accepts(spec: str, version: str) -> bool:
    """Whether an npm range accepts a version (the common forms; anything else: False)."""
    parsed = npm_version(version)
    if parsed is None:
        return False
    spec = spec.strip()
    if spec in ("", "*", "latest", "x"):
        return True
    for alternative in spec.split("||"):
        alternative = alternative.strip()
        hyphen = re.fullmatch(r"(\S+)\s+-\s+(\S+)", alternative)
        if hyphen:
            upper = _partial(hyphen.group(2))
            if upper is None or not upper[0]:
                return False
            numbers = upper[0]
            # A partial upper bound takes the whole of its last part: ``1 - 2`` is ``>=1 <3``.
            bound = (
                f"<={hyphen.group(2)}"
                if len(numbers) == 3
                else "<" + ".".join(map(str, [*numbers[:-1], numbers[-1] + 1]))
            )
            comps = [f">={hyphen.group(1)}", bound]
        else:
            comps = re.findall(r"(?:\^|~|>=|<=|>|<|=)?\s*[^\s]+", alternative)
        results = [_comparator(c.strip(), parsed) for c in comps] or [True]
        if all(r is True for r in results):
            return True
    return False


def split_npm(need: str) -> tuple[str, str]:
    at = need.rfind("@")
    return (need[:at], need[at + 1 :]) if at > 0 else (need, "*")


@dataclass(frozen=True, slots=True)
class ImagePackages:
    """The runner image's pinned packages (Python: canonical name -> (version, extras))."""

    python: dict[str, tuple[Version, frozenset[str]]] = field(default_factory=dict)
    node: dict[str, str] = field(default_factory=dict)
    #: A digest of the pins (part of every environment's key).
    digest: str = ""
    #: The Python tier the image carries.
    tier: PythonTier = DEFAULT_TIER

    @classmethod
    def load(cls, runner: Path, *, minimal: bool = False, tier: PythonTier = DEFAULT_TIER) -> ImagePackages:
        """Read the pins the tier's image is built from; a missing file pins nothing.  The
        default tier: the full flavour's (``minimal``: the minimal flavour's); another tier:
        the minimal flavour's and the tier's own, and no npm packages."""
        python: dict[str, tuple[Version, frozenset[str]]] = {}
        node: dict[str, str] = {}
        digest = hashlib.sha256(tier.target.encode())
        if tier != DEFAULT_TIER:
            minimal = True
            names = ["requirements-minimal.txt", "requirements-tier.txt"]
        else:
            names = ["requirements-minimal.txt" if minimal else "requirements-full.txt"]
        for name in names:
            cls._read_python(runner / name, python, digest)
        if not minimal:
            try:
                package = json.loads((runner / "npm" / "package.json").read_text())
                node = {str(k): str(v) for k, v in (package.get("dependencies") or {}).items()}
            except (OSError, ValueError, AttributeError):
                node = {}
            digest.update(json.dumps(node, sort_keys=True).encode())
        return cls(python, node, digest.hexdigest(), tier)

    @staticmethod
    def _read_python(pins_file: Path, python: dict[str, tuple[Version, frozenset[str]]], digest: Any) -> None:
        try:
            for pin in read_pins(pins_file):
                req = Requirement(pin)
                version = next(iter(req.specifier)).version
                python[canonicalize_name(req.name)] = (
                    Version(version),
                    frozenset(canonicalize_name(e) for e in req.extras),
                )
                digest.update(pin.encode() + b"\0")
        except (OSError, ExecutorError, InvalidRequirement, InvalidVersion) as exc:
            log.warning(
                "cannot read the runner image's Python pins from %s (%s): none counts as provided", pins_file, exc
            )

    def provides_python(self, need: str) -> bool:
        req = Requirement(need)
        pinned = self.python.get(canonicalize_name(req.name))
        if pinned is None:
            return False
        version, extras = pinned
        return {canonicalize_name(e) for e in req.extras} <= extras and req.specifier.contains(
            version, prereleases=True
        )

    def provides_node(self, need: str) -> bool:
        name, spec = split_npm(need)
        pinned = self.node.get(name)
        return pinned is not None and npm_range_accepts(spec, pinned)


def applies(need: str, tier: PythonTier = DEFAULT_TIER) -> bool:
    """Whether a Python need's markers hold for the tier's interpreter."""
    marker = Requirement(need).marker
    return marker is None or Marker(str(marker)).evaluate(markers(tier))


# -- planning and resolving environments -------------------------------------------


@dataclass(frozen=True, slots=True)
class Sources:
    """Where needs are resolved from (the operator's settings)."""

    index_url: str | None = None
    wheelhouse: Path | None = None
    npm_registry: str | None = None
    npm_wheelhouse: Path | None = None

    def describe(self) -> dict[str, str | None]:
        """The sources as every run may read them (the manifest) and the key hashes them:
        URLs as scheme and host only (:func:`~skill_executor.envs.hosttools.redact_url`: a token
        may be the userinfo, a path segment or the query)."""
        return {
            "index_url": redact_url(self.index_url) if self.index_url else None,
            "wheelhouse": str(self.wheelhouse) if self.wheelhouse else None,
            "npm_registry": redact_url(self.npm_registry) if self.npm_registry else None,
            "npm_wheelhouse": str(self.npm_wheelhouse) if self.npm_wheelhouse else None,
        }

    def secrets(self) -> set[str]:
        """What of the sources must never leave the host process (see :func:`url_secrets`)."""
        return url_secrets(self.index_url) | url_secrets(self.npm_registry)


@dataclass(frozen=True, slots=True)
class EnvPlan:
    """A skill's needs, split into what the image provides and what its environment holds."""

    needs: Needs
    provided: tuple[str, ...]
    python: tuple[str, ...]
    node: tuple[str, ...]
    #: The environment's folder name under the envs root; None: nothing to install.
    key: str | None
    #: The Python tier the skill runs on.
    tier: PythonTier = DEFAULT_TIER


def env_key(python: Iterable[str], node: Iterable[str], image: ImagePackages, sources: Sources) -> str:
    data = {
        "python": sorted(python),
        "node": sorted(node),
        "target": image.tier.target,
        "image": image.digest,
        "sources": sources.describe(),
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:32]


def plan(needs: Needs, image: ImagePackages, sources: Sources) -> EnvPlan:
    provided: list[str] = []
    python: list[str] = []
    for need in needs.python:
        if not applies(need, image.tier):
            continue
        (provided if image.provides_python(need) else python).append(need)
    node: list[str] = []
    for need in needs.node:
        (provided if image.provides_node(need) else node).append(need)
    key = env_key(python, node, image, sources) if python or node else None
    return EnvPlan(needs, tuple(provided), tuple(python), tuple(node), key, image.tier)
