"""The interpreter versions a skill asks for: ``engines.node`` of a package.json,
``requires-python`` of a pyproject.toml or a PEP 723 block, "Node.js 22+" in its docs."""

from __future__ import annotations

import json
import re

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from .model import ImageNeeds

#: ``requires-python = ">=3.12"`` of a pyproject.toml, and of a PEP 723 block (``# `` lines).
REQUIRES_PYTHON = re.compile(r"""^requires-python\s*=\s*["']([^"'\n]{1,64})["']""", re.M)
SCRIPT_REQUIRES_PYTHON = re.compile(r"""^#\s*requires-python\s*=\s*["']([^"'\n]{1,64})["']""", re.M)
#: A version the docs ask for: "Node.js 22+", "Node 22 or later", "Node.js >= 18", "Python 3.12+".
PROSE_VERSION = re.compile(
    r"\b(Node(?:\.js)?|Python)[ \t]*(?:v|version[ \t]*)?"
    r"(?:(\d{1,2}(?:\.\d{1,2})?)(?:\+|[ \t]+or[ \t]+(?:later|newer|higher|above))"
    r"|>=[ \t]*v?(\d{1,2}(?:\.\d{1,2})?))"
)


def manifest_versions(needs: ImageNeeds, path: str, text: str) -> None:
    """``engines.node`` of a package.json, ``requires-python`` of a pyproject.toml."""
    if path.endswith("package.json"):
        try:
            engines = json.loads(text).get("engines", {})
        except (ValueError, AttributeError):
            return
        spec = engines.get("node") if isinstance(engines, dict) else None
        if isinstance(spec, str):
            version_need(needs, "node", spec, path, _line_of(text, '"node"'))
        return
    match = REQUIRES_PYTHON.search(text)
    if match:
        version_need(needs, "python", match.group(1), path, text.count("\n", 0, match.start()) + 1)


def script_version(needs: ImageNeeds, path: str, text: str) -> None:
    """``requires-python`` of a PEP 723 ``# /// script`` block."""
    match = SCRIPT_REQUIRES_PYTHON.search(text)
    if match:
        version_need(needs, "python", match.group(1), path, text.count("\n", 0, match.start()) + 1)


def prose_versions(needs: ImageNeeds, path: str, text: str) -> None:
    """ "Node.js 22+", "Node >= 18", "Python 3.12+", "Python >= 3.12" in the docs."""
    for match in PROSE_VERSION.finditer(text):
        name = "node" if match.group(1).lower().startswith("node") else "python"
        version = match.group(2) or match.group(3)
        if name == "python" and "." not in version:
            continue  # "Python 3+": no requirement worth a check
        version_need(needs, name, f">={version}", path, text.count("\n", 0, match.start()) + 1)


def version_need(needs: ImageNeeds, name: str, spec: str, path: str, line: int) -> None:
    spec = spec.strip().replace(" ", "")
    if spec.startswith("^"):  # npm's ^22: the major's floor (the upper bound is no check)
        spec = ">=" + spec[1:]
    try:
        SpecifierSet(spec)
    except InvalidSpecifier:
        return  # an npm range pip's grammar does not read ("18 || 20"): not checked
    needs.runtime(name, spec, path, line)


# -- shell ----------------------------------------------------------------------------------


def _line_of(text: str, needle: str) -> int:
    at = text.find(needle)
    return 1 if at < 0 else text.count("\n", 0, at) + 1
