"""The gates a skill's declared need passes before pip or npm sees it: pure functions over
text, shared by the dependency environments (:mod:`skill_executor.envs`) and the doctor's scan
(:mod:`skill_executor.preflight`), which both read needs but must not import each other.

:func:`safe_python_need` and :func:`safe_npm_spec` are the only gates a need passes before pip
or npm sees it.
"""

from __future__ import annotations

import re

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

NPM_NAME = re.compile(r"^(@[a-z0-9][a-z0-9._~-]*/)?[a-z0-9][a-z0-9._~-]*$")
#: What an npm spec may be: a registry version, range or tag -- nothing npm could read as a
#: URL, a git or file spec, an alias or a tarball (npm matches schemes in any case).
NPM_SPEC = re.compile(r"^[0-9A-Za-z.+^~<>=|* -]{0,256}$")
#: File names pip or npm would read as a package file rather than a name on the index.
ARCHIVE = (".tgz", ".tar", ".tar.gz", ".tar.bz2", ".tar.xz", ".tbz", ".txz", ".zip", ".whl")
#: What a formatted Python need may be before its marker: a name, extras and PEP 440
#: specifiers (no ``===``, nothing pip could read as a path or a URL).
PY_NEED = re.compile(
    r"^[a-z0-9]([a-z0-9._-]*[a-z0-9])?(\[[a-z0-9._,-]+\])?"
    r"((~=|==|!=|<=|>=|<|>)[0-9A-Za-z.*+!_-]+(,(~=|==|!=|<=|>=|<|>)[0-9A-Za-z.*+!_-]+)*)?$"
)


#: What a need may not contain: pip expands ``${VAR}`` in requirement files (the service's
#: environment, so a skill could read it back from pip's error), and characters that
#: ``str.splitlines`` (pip's line splitting) treats as line breaks would smuggle options.
UNSAFE_TEXT = re.compile(r"[$\x00-\x1f\x7f-\x9f\u2028\u2029]")


def normalise_requirement(text: str) -> Requirement:
    """A PEP 508 requirement without URL, canonically named; ``InvalidRequirement`` else."""
    if UNSAFE_TEXT.search(text):
        raise InvalidRequirement("'$', control characters and line separators are not allowed in a need")
    req = Requirement(text)
    if req.url:
        raise InvalidRequirement("a URL requirement is not allowed (needs come from the configured index)")
    for spec in req.specifier:
        if spec.operator == "===":
            # Arbitrary equality takes any text, paths included, which pip reads as a local project.
            raise InvalidRequirement("'===' (arbitrary equality) is not allowed; use '=='")
    req.name = canonicalize_name(req.name)
    req.extras = {canonicalize_name(e) for e in req.extras}
    return req


def safe_python_need(need: str) -> bool:
    """Whether pip can only read ``need`` as a requirement on the index (never a path or URL)."""
    head = need.split(";", 1)[0].strip()
    name = re.split(r"[\[<>=!~]", head, maxsplit=1)[0]
    return bool(PY_NEED.match(head)) and not name.endswith(ARCHIVE) and not UNSAFE_TEXT.search(need)


def safe_npm_spec(spec: str) -> bool:
    """Whether npm can only read ``spec`` as a registry version, range or tag."""
    return bool(NPM_SPEC.match(spec)) and not spec.lower().endswith(ARCHIVE)


def format_requirement(req: Requirement) -> str:
    text = req.name
    if req.extras:
        text += "[" + ",".join(sorted(req.extras)) + "]"
    if req.specifier:
        text += ",".join(sorted(str(s) for s in req.specifier))
    if req.marker is not None:
        text += f"; {req.marker}"
    return text
