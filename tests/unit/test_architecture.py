"""The package's shape: imports only go downwards through the layers the layer map of
docs/concepts/architecture.md lists, there are no import cycles, and only the modules allowed to
start processes do (read from the source, not run)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent.parent / "skill_executor"

#: Lowest layer first; a module may import from its own layer and the ones before it.
LAYERS = [
    # The in-pod server runs in the runner image, apart from the service: it imports nothing of
    # it (test_the_podserver_imports_only_itself below), so it is the bottom layer.
    {"skill_executor.podserver"},
    {
        "skill_executor",
        "skill_executor.errors",
        "skill_executor.errorcodes",
        "skill_executor.config",
        "skill_executor.paths",
        "skill_executor.owners",
        "skill_executor.activity",
        "skill_executor.workers",
        "skill_executor.tracing",
        "skill_executor.extras",
    },
    {"skill_executor.access"},
    {"skill_executor.db", "skill_executor.objects"},
    {"skill_executor.skills", "skill_executor.image", "skill_executor.shell"},
    {"skill_executor.envs", "skill_executor.preflight", "skill_executor.policy"},
    {"skill_executor.egress"},
    {"skill_executor.registry"},
    {"skill_executor.artifacts"},
    {"skill_executor.workspace"},
    {"skill_executor.outputs"},
    {"skill_executor.runtimes"},
    {"skill_executor.runs"},
    {"skill_executor.lifecycle"},
    {"skill_executor.processes"},
    {"skill_executor.context"},
    {"skill_executor.core", "skill_executor.tools", "skill_executor.doctor", "skill_executor.service"},
    {"skill_executor.web"},
    {"skill_executor.mcp", "skill_executor.testing"},
    {"skill_executor.api"},
    {"skill_executor.cli"},
]


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules whose code importing ``name`` runs: each module it imports, and the
    ``__init__`` of every package above that module which does not also hold ``name`` (importing
    ``a.b.c`` runs ``a/__init__``, ``a/b/__init__``, then ``c``; a loop through an ``__init__`` is
    a loop)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            # ``from pkg import sub`` imports the submodule ``sub``; ``from pkg import name`` runs pkg.
            found = {f"{target}.{alias.name}" for alias in node.names if f"{target}.{alias.name}" in known}
            if len(found) < len(node.names):
                found.add(target)
        elif isinstance(node, ast.Import):
            found = {alias.name for alias in node.names}
        else:
            continue
        for module in found:
            parts = module.split(".")
            chain = {".".join(parts[:n]) for n in range(1, len(parts) + 1)}
            targets |= {
                c for c in chain if c in known and c != name and not (package == c or package.startswith(c + "."))
            }
    return targets


def layer(name: str) -> int:
    for index, members in enumerate(LAYERS):
        if (
            any(name == m or name.startswith(m + ".") for m in members if m != "skill_executor")
            or name == "skill_executor"
        ):
            return index
    raise AssertionError(
        f"{name} is in no layer: add it to LAYERS and to the layer map in docs/concepts/architecture.md"
    )


def test_imports_only_go_downwards() -> None:
    known = modules()
    upward = [
        f"{name} (layer {layer(name)}) imports {target} (layer {layer(target)})"
        for name, path in known.items()
        for target in imports(name, path, known)
        if layer(target) > layer(name)
    ]
    assert upward == []


def test_no_import_cycles() -> None:
    known = modules()
    graph = {name: imports(name, path, known) - {name} for name, path in known.items()}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                cycles.append(trail[trail.index(target) :] + [target])
            elif target not in state:
                visit(target, [*trail, target])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert cycles == []


#: The only modules that may start a process on the service's host: the one runner of host
#: tools over untrusted input (pip and npm over a skill's needs), the runner image's build
#: (the project's own files) and the local runtime (development only: runs commands as the
#: service, by design); and, not on the service's host, the in-pod server in the runner image.  Anything else that needs a tool goes through skill_executor/envs/hosttools.py.
#: mkfs.ext4 in workspace/volumes.py formats the service's own image files (never skill content).
PROCESS_STARTERS = {
    "skill_executor.podserver.process",  # in the pod: each child through the launcher's filter
    "skill_executor.envs.hosttools",
    "skill_executor.egress.gateway",  # the egress gateway's process (mitmproxy, in its own environment)
    "skill_executor.image.build",
    "skill_executor.runtimes.bwrap",  # the run's sandbox (bwrap, as the run's user)
    "skill_executor.runtimes.bwrapbox",  # the same sandbox's bwrap command
    "skill_executor.runtimes.local",
    "skill_executor.workspace.volumes",
}
PROCESS_MODULES = {"subprocess", "pty", "multiprocessing", "concurrent.futures.process"}
#: ``os`` functions that start or replace processes.
OS_PROCESS = ("system", "popen", "exec", "spawn", "posix_spawn", "fork")


def starts_processes(path: Path) -> list[str]:
    """How a module could start a process (empty: it cannot, as far as its source says)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [
                f"import {a.name}"
                for a in node.names
                if a.name.split(".")[0] in PROCESS_MODULES or a.name in PROCESS_MODULES
            ]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            module = node.module or ""
            if module in PROCESS_MODULES or module.split(".")[0] in {"subprocess", "pty", "multiprocessing"}:
                found.append(f"from {module} import ...")
            elif module in ("os", "asyncio") and any(
                a.name.startswith(OS_PROCESS) or "subprocess" in a.name for a in node.names
            ):
                found.append(f"from {module} import {', '.join(a.name for a in node.names)}")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id == "os" and node.attr.startswith(OS_PROCESS):
                found.append(f"os.{node.attr}")
            elif node.value.id == "asyncio" and node.attr.startswith("create_subprocess"):
                found.append(f"asyncio.{node.attr}")
    return found


def test_only_the_allowed_modules_start_processes() -> None:
    """A process started anywhere else could run a tool over a skill's files without the
    isolation skill_executor/envs/hosttools.py gives it (a fresh folder, a scrubbed environment,
    another user)."""
    starters = {name: how for name, path in modules().items() if (how := starts_processes(path))}
    assert set(starters) <= PROCESS_STARTERS, {k: v for k, v in starters.items() if k not in PROCESS_STARTERS}
    assert "skill_executor.envs.hosttools" in starters  # the check sees what it looks for
    # pip, npm: through hosttools.py only
    assert [p.name for p in (PACKAGE / "envs").glob("*.py") if starts_processes(p)] == ["hosttools.py"]
    assert [p.name for p in (PACKAGE / "doctor").glob("*.py") if starts_processes(p)] == []  # the probe: in the sandbox


def test_no_class_name_is_used_twice() -> None:
    """A newcomer reading ``Needs`` or ``Verdict`` knows which one it is: a class name names
    one thing in the package (wire schemas in api/schemas.py included)."""
    defined: dict[str, list[str]] = {}
    for name, path in modules().items():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                defined.setdefault(node.name, []).append(name)
    assert {k: v for k, v in defined.items() if len(v) > 1} == {}


def test_the_podserver_imports_only_itself() -> None:
    """The image copies skill_executor/podserver/ alone: a module of the service imported there
    would not be found in the pod (nor should the service's code run next to a skill's)."""
    known = modules()
    podserver = {name: path for name, path in known.items() if name.startswith("skill_executor.podserver")}
    assert podserver
    for name, path in podserver.items():
        outside = {t for t in imports(name, path, known) if not t.startswith("skill_executor.podserver")}
        assert outside == set(), (name, outside)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import | ast.ImportFrom) and not getattr(node, "level", 0):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                assert all(n.split(".")[0] != "skill_executor" for n in names), (name, names)


#: The runtime seam's box side (skill_executor/runtimes/base.py): only the runtimes and the one
#: runtime-neutral sandbox over a box (skill_executor/runs/sandbox.py) may name these.
BOX_TYPES = {"Box", "Process", "ProcessSpec", "BoxVerdict", "BoxEntry", "Chunk"}
#: The modules of box implementations only, and the implementations' classes.
BOX_MODULES = ("skill_executor.runtimes.host", "skill_executor.runtimes.docker.sandboxes")
BOX_CLASSES = {"SharedBox", "LocalBox", "LocalProcess", "ColdBox", "ColdProcess", "WarmBox", "WarmProcess"}


def test_only_the_neutral_sandbox_drives_boxes() -> None:
    """The pipeline (and everything above the runtimes) claims a box and wraps it in
    runs/sandbox.py's RunSandbox; it never names a box, a process or a box's class."""
    known = modules()
    seen: dict[str, list[str]] = {}
    for name, path in known.items():
        if name.startswith("skill_executor.runtimes") or name == "skill_executor.runs.sandbox":
            continue
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            names = {alias.name for alias in node.names}
            if target == "skill_executor.runtimes.base" and names & BOX_TYPES:
                seen.setdefault(name, []).extend(sorted(names & BOX_TYPES))
            elif names & BOX_CLASSES:
                seen.setdefault(name, []).extend(sorted(names & BOX_CLASSES))
            elif target.startswith(BOX_MODULES):
                seen.setdefault(name, []).append(target)
    assert seen == {}
    assert "skill_executor.runs.pipeline" in known
