"""Real workloads: document-skill invocations through our service next to a plain ``docker run``.

    .venv/bin/python bench/workloads.py [--quick] [--out FILE]

For each workload the same command runs, on the same engine and image,

* **plain**: a ``docker run --rm`` done with the Docker SDK's low-level API (create, start,
  wait, logs, remove: what bench/run.py calls the floor) -- a fresh read-write copy of the
  skill folder bind-mounted at ``/bench/skill`` (the working directory, with ``work/`` and
  ``out/`` inside), ``HOME=/bench/home`` and ``TMPDIR=/bench/tmp`` on the same bind mount
  (disk-backed, as our ``run/home`` and ``run/tmp`` are), ``PYTHONPATH`` the skill folder,
  network disabled, uid 1000, ``bash -c <command>``;
* **ours**: ``POST /v1/runs`` to ``skill-executor serve`` (a subprocess, warm pool of 2) with
  the skill, the command, output globs ``out/**`` and timeout 300 -- the fixture skills of
  ``tests/fixtures/world`` copied into a temporary skills folder (served as the install root,
  as ``bench.run.Service`` always passes the repository's own ``skills/`` as ``--skills-dir``).

Samples are taken in turn (plain, ours, plain, ...) with a pause between runs so the warm pool
keeps up and the engine settles (its speed drifts by tens of percent within a minute); each
side's p50 and the ratio ours/plain (target <= 1.05) are reported.

Where the time goes: ours is split into the command in the container (the service's own
``duration_ms``) and the rest (HTTP, workspace, skill copy, pool hand-over, output collection).
For LibreOffice, measured inside a plain container with ``date +%s%N``: a first
``soffice --convert-to pdf`` with a fresh profile next to a second call in the same command
(profile exists), and -- not with ``--quick`` -- a ``--terminate_after_init`` start with a
fresh and with the existing profile and a third conversion with another fresh profile; then
the conversion with a profile copied into ``HOME`` beforehand (what a warm-pool container could
be given while it waits), made once by ``--terminate_after_init`` (not with ``--quick``) and
once by a real conversion of a one-line text file.

``--quick`` (<= 40 s): one sample each, the heavy workloads (xlsx recalc, pptx thumbnails)
left out, one round of the LibreOffice split.  Prints a table and the JSON, and writes it to
``--out`` (default bench/results/workloads.json).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import docker

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.run import Service, stats, timed  # noqa: E402
from skill_executor.config import Settings  # noqa: E402

WORLD = REPO / "tests" / "fixtures" / "world"
TARGET = 1.05
RUN_TIMEOUT = 300
#: Where the plain run sees its folder (skill/, home/, tmp/).
PLAIN_ROOT = "/bench"
UID = 1000


@dataclass(frozen=True)
class Workload:
    skill: str
    command: str
    #: Files the command must leave under the skill folder (``out/...``).
    outputs: tuple[str, ...]
    #: Left out with ``quick``.
    heavy: bool = False


WORKLOADS: dict[str, Workload] = {
    "pdf_form_fill": Workload(
        "pdf-forms",
        'python scripts/make_form.py work/form.pdf && echo \'{"customer": "Ada Lovelace"}\' > work/fields.json'
        " && python scripts/fill_fields.py work/form.pdf work/fields.json out/filled.pdf",
        ("out/filled.pdf",),
    ),
    "xlsx_recalc": Workload(
        "sheet-recalc",
        "python scripts/make_book.py out/model.xlsx && python scripts/recalc.py out/model.xlsx 90",
        ("out/model.xlsx",),
        heavy=True,
    ),
    "docx_to_pdf": Workload(
        "docx-kit",
        "node scripts/make_doc.js out/new.docx 'Quarterly report'"
        " && soffice --headless --convert-to pdf --outdir out out/new.docx",
        ("out/new.docx", "out/new.pdf"),
    ),
    "pptx_thumbnails": Workload(
        "pptx-kit",
        "node scripts/make_deck.js out/deck.pptx 'Matrix deck'"
        " && python scripts/thumbnail.py out/deck.pptx out/thumbs --cols 2",
        ("out/deck.pptx", "out/thumbs.png"),
        heavy=True,
    ),
    "import_pandas": Workload("pdf-forms", "python3 -c 'import pandas'", ()),
}


class WorkloadFailed(RuntimeError):
    pass


# -- plain docker run -----------------------------------------------------------------------------


def _own(path: Path) -> None:
    """Hand ``path`` and everything below it to the container's uid (we run as root on the host)."""
    for folder, dirs, files in os.walk(path):
        os.chown(folder, UID, UID)
        for name in [*dirs, *files]:
            os.chown(os.path.join(folder, name), UID, UID, follow_symlinks=False)


def plain_folder(scratch: Path, skill: str, home_template: Path | None = None) -> Path:
    """A fresh folder for one plain run: ``skill/`` (a copy, with ``work/`` and ``out/``),
    ``home/`` (empty, or a copy of ``home_template``) and ``tmp/``."""
    root = Path(tempfile.mkdtemp(prefix="plain-", dir=scratch))
    shutil.copytree(WORLD / skill, root / "skill")
    (root / "skill" / "work").mkdir()
    (root / "skill" / "out").mkdir()
    if home_template is not None:
        shutil.copytree(home_template, root / "home", symlinks=True)
    else:
        (root / "home").mkdir()
    (root / "tmp").mkdir()
    _own(root)
    return root


def _engine_time(stamp: str) -> float:
    """Seconds since the epoch of the engine's RFC 3339 time with nanoseconds."""
    whole, _, fraction = stamp.rstrip("Z").partition(".")
    return datetime.fromisoformat(whole).replace(tzinfo=timezone.utc).timestamp() + float(f"0.{fraction or 0}")


def plain_run(
    client: docker.DockerClient,
    image: str,
    root: Path,
    command: str,
    exec_ms: list[float] | None = None,
    limits: dict[str, int] | None = None,
) -> tuple[int, str]:
    """``docker run --rm`` of ``bash -c command`` over ``root`` (SDK low-level API); exit code and
    output.  ``exec_ms`` gets the container's own run time (StartedAt to FinishedAt); ``limits``:
    extra host-config settings (``nano_cpus``, ``mem_limit``, ...)."""
    api = client.api
    host_config = api.create_host_config(binds={str(root): {"bind": PLAIN_ROOT, "mode": "rw"}}, **(limits or {}))
    container = api.create_container(
        image,
        ["bash", "-c", command],
        user=f"{UID}:{UID}",
        working_dir=f"{PLAIN_ROOT}/skill",
        environment={"HOME": f"{PLAIN_ROOT}/home", "TMPDIR": f"{PLAIN_ROOT}/tmp", "PYTHONPATH": f"{PLAIN_ROOT}/skill"},
        host_config=host_config,
        network_disabled=True,
        labels={"io.skill-executor.bench": "workloads-plain"},
    )
    try:
        api.start(container)
        status = api.wait(container, timeout=RUN_TIMEOUT + 30)
        logs = api.logs(container, stdout=True, stderr=True).decode(errors="replace")
        if exec_ms is not None:
            state = api.inspect_container(container)["State"]
            exec_ms.append((_engine_time(state["FinishedAt"]) - _engine_time(state["StartedAt"])) * 1000)
    finally:
        api.remove_container(container, force=True)
    return int(status["StatusCode"]), logs


class PlainSide:
    """Plain samples of one workload: ``prepare`` makes the next sample's folder before the
    clock starts; calling runs it (and checks its exit code and output files)."""

    def __init__(
        self,
        client: docker.DockerClient,
        image: str,
        scratch: Path,
        workload: Workload,
        limits: dict[str, int] | None = None,
    ) -> None:
        self.client, self.image, self.scratch, self.workload = client, image, scratch, workload
        self.limits = limits
        self.folders: list[Path] = []
        #: Each sample's time in the container (StartedAt to FinishedAt).
        self.exec_ms: list[float] = []

    def prepare(self) -> None:
        self.folders.append(plain_folder(self.scratch, self.workload.skill))

    def __call__(self) -> None:
        root = self.folders.pop()
        try:
            code, logs = plain_run(self.client, self.image, root, self.workload.command, self.exec_ms, self.limits)
            missing = [name for name in self.workload.outputs if not (root / "skill" / name).is_file()]
            if code != 0 or missing:
                raise WorkloadFailed(f"plain {self.workload.skill}: exit {code}, missing {missing}\n{logs[-2000:]}")
        finally:
            shutil.rmtree(root, ignore_errors=True)


# -- ours -----------------------------------------------------------------------------------------


def ours_workload(service: Service, workload: Workload, durations: list[float]) -> Callable[[], None]:
    """One run through ours; appends the service's own ``duration_ms`` (the command in the
    container, from start to exit) to ``durations``."""

    def run() -> None:
        body = {
            "skill": workload.skill,
            "command": workload.command,
            "timeout": RUN_TIMEOUT,
            "outputs": {"globs": ["out/**"]},
        }
        response = service.http.post("/v1/runs", json=body, timeout=RUN_TIMEOUT + 60)
        if response.status_code != 200:
            raise WorkloadFailed(f"ours {workload.skill}: HTTP {response.status_code} {response.text[:2000]}")
        result = response.json()
        names = {item["name"] for item in result["output_files"]}
        missing = [name for name in workload.outputs if name not in names]
        if result["exit_code"] != 0 or missing:
            raise WorkloadFailed(
                f"ours {workload.skill}: exit {result['exit_code']}, missing {missing}\n"
                f"stdout: {result['stdout'][-1500:]}\nstderr: {result['stderr'][-1500:]}"
            )
        durations.append(float(result["duration_ms"]))

    return run


# -- where the time goes (LibreOffice) ---------------------------------------------------------------

#: Prints ``<label> <ms>`` lines: each step's wall time inside the container.
STEP = 'step() { local t0=$(date +%s%N); "${@:2}" >/dev/null 2>&1 || exit 7; echo "$1 $(( ($(date +%s%N) - t0) / 1000000 ))"; }; '

DOCX_MAKE = "node scripts/make_doc.js out/new.docx 'Quarterly report'"
CONVERT = "soffice --headless --convert-to pdf --outdir out out/new.docx"
FIRST_SECOND_QUICK = STEP + f"step make_doc {DOCX_MAKE}; step first_convert {CONVERT}; step second_convert {CONVERT}"
FIRST_SECOND = (
    FIRST_SECOND_QUICK + "; "
    "step terminate_after_init_fresh_profile soffice -env:UserInstallation=file://$TMPDIR/p2 --headless"
    " --terminate_after_init; "
    "step terminate_after_init_existing_profile soffice --headless --terminate_after_init; "
    "step third_convert_other_fresh_profile soffice -env:UserInstallation=file://$TMPDIR/p3 --headless"
    f" {CONVERT.removeprefix('soffice --headless ')}"
)
PREWARMED = STEP + f"step make_doc {DOCX_MAKE}; step convert {CONVERT}"


def _steps(logs: str) -> dict[str, float]:
    out = {}
    for line in logs.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            out[parts[0]] = float(parts[1])
    return out


#: Ways to make a LibreOffice profile in ``home/`` ahead of a run: what a warm-pool container
#: (or the pool filler, copying a template into the waiting container's ``run/home``) could do.
PROFILE_MAKERS = {
    # One start that ends after initialisation: quick, but the profile it leaves is incomplete.
    "terminate_after_init": "soffice --headless --terminate_after_init",
    # A real conversion of a one-line text file: the profile a first conversion leaves behind.
    "one_conversion": "echo warm > $TMPDIR/warm.txt && soffice --headless --convert-to pdf --outdir $TMPDIR $TMPDIR/warm.txt",
}


def libreoffice_profile(client: docker.DockerClient, image: str, scratch: Path, command: str) -> Path:
    """The ``home/`` a plain run of ``command`` leaves behind (with a LibreOffice profile in it)."""
    root = plain_folder(scratch, "docx-kit")
    code, logs = plain_run(client, image, root, command)
    if code != 0 or not (root / "home" / ".config" / "libreoffice").is_dir():
        raise WorkloadFailed(f"could not make a LibreOffice profile with {command!r}: exit {code}\n{logs[-2000:]}")
    return root / "home"


def bench_libreoffice(
    client: docker.DockerClient, image: str, scratch: Path, rounds: int, quick: bool, pause: float
) -> dict[str, Any]:
    """A first soffice conversion against a second one in the same container (and, unless
    ``quick``, profile creation by ``--terminate_after_init`` and a conversion with a second
    fresh profile), then the conversion with a profile copied into ``HOME`` beforehand, for
    each way of making one (``quick``: only by a conversion), samples in turn."""
    makers = {"one_conversion": PROFILE_MAKERS["one_conversion"]} if quick else PROFILE_MAKERS
    split_command = FIRST_SECOND_QUICK if quick else FIRST_SECOND
    templates = {name: libreoffice_profile(client, image, scratch, command) for name, command in makers.items()}
    split: dict[str, list[float]] = {}
    runs: dict[str, list[float]] = {}
    converts: dict[str, list[float]] = {}

    def sample(command: str, home: Path | None) -> tuple[float, dict[str, float]]:
        root = plain_folder(scratch, "docx-kit", home)
        try:
            logs = ""

            def go() -> None:
                nonlocal logs
                code, logs = plain_run(client, image, root, command)
                if code != 0 or not (root / "skill" / "out" / "new.pdf").is_file():
                    raise WorkloadFailed(f"libreoffice sample: exit {code}\n{logs[-2000:]}")

            return timed(go), _steps(logs)
        finally:
            shutil.rmtree(root, ignore_errors=True)

    for _ in range(rounds):
        time.sleep(pause)
        _, steps = sample(split_command, None)
        for key, value in steps.items():
            split.setdefault(key, []).append(value)
        for name, template in templates.items():
            time.sleep(pause)
            total, steps = sample(PREWARMED, template)
            runs.setdefault(name, []).append(total)
            converts.setdefault(name, []).append(steps["convert"])
    for template in templates.values():
        shutil.rmtree(template.parent, ignore_errors=True)
    out: dict[str, Any] = {f"{key}_ms": stats(values) for key, values in split.items()}
    first = out["first_convert_ms"]["p50"]
    out["first_start_cost_ms"] = first - out["second_convert_ms"]["p50"]
    out["profile_in_home"] = {
        name: {
            "run_ms": stats(runs[name]),
            "convert_ms": stats(converts[name]),
            "saves_ms": first - stats(converts[name])["p50"],
        }
        for name in templates
    }
    return out


# -- the benchmark ----------------------------------------------------------------------------------


def alternate(sides: list[Callable[[], None]], count: int, pause: float) -> list[list[float]]:
    """``count`` samples of each side, in turn; a plain side's folder is prepared before its clock starts."""
    samples: list[list[float]] = [[] for _ in sides]
    for _ in range(count):
        for side, taken in zip(sides, samples):
            if isinstance(side, PlainSide):
                side.prepare()
            time.sleep(pause)
            taken.append(timed(side))
    return samples


def ours_limits() -> dict[str, int]:
    """Our containers' CPU and memory limits (``SKILL_EXECUTOR_DOCKER_CPUS``/``_MEMORY_BYTES``),
    as a plain run's host-config settings."""
    settings = Settings()
    return {
        "nano_cpus": int(settings.docker_cpus * 1e9),
        "mem_limit": settings.docker_memory_bytes,
        "memswap_limit": settings.docker_memory_bytes,
    }


def bench_workloads(
    base: Path,
    client: docker.DockerClient,
    image: str,
    quick: bool,
    names: list[str] | None = None,
    first_start: bool = True,
) -> dict[str, Any]:
    """Each workload plain and through ours (samples in turn), and where LibreOffice's time goes.

    ``names``: the workloads to run (default: all; with ``quick``, all but the heavy ones).
    ``quick`` takes one sample of each and one round of the LibreOffice split (<= 40 s);
    ``first_start=False`` leaves the LibreOffice split out."""
    if names is None:
        names = [name for name, w in WORKLOADS.items() if not (quick and w.heavy)]
    count, rounds, pause = (1, 1, 0.5) if quick else (4, 3, 1.0)
    base = Path(tempfile.mkdtemp(prefix="workloads-", dir=base))
    skills = base / "skills"
    shutil.copytree(WORLD, skills)
    scratch = base / "plain"
    scratch.mkdir()
    results: dict[str, Any] = {
        "image": image,
        "quick": quick,
        "samples": count,
        "plain": "SDK create+start+wait+logs+remove",
        "workloads": {},
    }
    limits = ours_limits()
    results["plain_capped_limits"] = f"cpus {limits['nano_cpus'] / 1e9:g}, memory {limits['mem_limit'] // 2**20} MiB"
    began = time.monotonic()
    service = Service(
        base,
        pool_size=2,
        docker_image=image,
        install_dir=skills,
        max_timeout=RUN_TIMEOUT,
        docker_cpus=limits["nano_cpus"] / 1e9,
        docker_memory_bytes=limits["mem_limit"],
    )
    try:
        # The pool's first containers, and both sides' first start of the image, before the clock.
        warm_up = Workload("pdf-forms", "true", ())
        ours_workload(service, warm_up, [])()
        plain = PlainSide(client, image, scratch, warm_up)
        plain.prepare()
        plain()
        time.sleep(pause)
        for name in names:
            workload = WORKLOADS[name]
            durations: list[float] = []
            plain = PlainSide(client, image, scratch, workload)
            sides: list[Callable[[], None]] = [plain, ours_workload(service, workload, durations)]
            capped = PlainSide(client, image, scratch, workload, ours_limits())
            if not quick:
                sides.append(capped)
            plain_samples, ours_samples, *capped_samples = alternate(sides, count, pause)
            plain_stats, ours_stats = stats(plain_samples), stats(ours_samples)
            results["workloads"][name] = {
                "skill": workload.skill,
                "command": workload.command,
                "plain_ms": plain_stats,
                "ours_ms": ours_stats,
                "ratio": ours_stats["p50"] / plain_stats["p50"],
                "overhead_ms": ours_stats["p50"] - plain_stats["p50"],
                # Ours split: the command in the container (the service's duration_ms) and the
                # rest (HTTP, workspace, skill copy, pool hand-over, output collection).
                "ours_exec_ms": stats(durations),
                "ours_outside_exec_ms": stats([t - d for t, d in zip(ours_samples, durations)]),
                # Plain split: the container's run (StartedAt to FinishedAt, by the engine's
                # clock) and the rest (create, start, wait, logs, remove).
                "plain_exec_ms": stats(plain.exec_ms),
                "plain_outside_exec_ms": stats([t - d for t, d in zip(plain_samples, plain.exec_ms)]),
            }
            if capped_samples:
                # The plain run with our containers' CPU and memory limits: how much of the
                # command's time in ours is the CPU cap (this machine has 2 cores).
                row = results["workloads"][name]
                row["plain_capped_ms"] = stats(capped_samples[0])
                row["plain_capped_exec_ms"] = stats(capped.exec_ms)
                row["ratio_vs_capped"] = ours_stats["p50"] / row["plain_capped_ms"]["p50"]
    finally:
        service.stop()
    if first_start:
        results["libreoffice_first_start"] = bench_libreoffice(client, image, scratch, rounds, quick, pause / 2)
    results["seconds"] = round(time.monotonic() - began, 1)
    shutil.rmtree(base, ignore_errors=True)
    return results


def report(r: dict[str, Any]) -> None:
    print(
        f"\n{'workload (ms)':18} {'plain p50':>9} {'ours p50':>9} {'plain p90':>9} {'ours p90':>9}"
        f" {'pl exec':>8} {'pl rest':>8} {'our exec':>8} {'our rest':>8} {'ratio':>6}  target <= {TARGET}"
    )
    for name, w in r["workloads"].items():
        verdict = "MET" if w["ratio"] <= TARGET else "MISSED"
        print(
            f"{name:18} {w['plain_ms']['p50']:9.0f} {w['ours_ms']['p50']:9.0f} {w['plain_ms']['p90']:9.0f}"
            f" {w['ours_ms']['p90']:9.0f} {w['plain_exec_ms']['p50']:8.0f} {w['plain_outside_exec_ms']['p50']:8.0f}"
            f" {w['ours_exec_ms']['p50']:8.0f} {w['ours_outside_exec_ms']['p50']:8.0f}"
            f" {w['ratio']:6.3f}  {verdict} (n={w['plain_ms']['n']})"
        )
    print(
        "(exec: the command's time in the container -- plain: the engine's StartedAt..FinishedAt,"
        " ours: the service's duration_ms; rest: everything else)"
    )
    capped = {name: w for name, w in r["workloads"].items() if "plain_capped_ms" in w}
    if capped:
        print(
            f"\n{'plain with our limits (' + r['plain_capped_limits'] + ')':46} {'p50':>9} {'exec p50':>9}"
            f" {'ours/capped':>12}"
        )
        for name, w in capped.items():
            print(
                f"{name:46} {w['plain_capped_ms']['p50']:9.0f} {w['plain_capped_exec_ms']['p50']:9.0f}"
                f" {w['ratio_vs_capped']:12.3f}"
            )
    lo = r["libreoffice_first_start"]
    print("\nLibreOffice, inside a plain container (p50 ms):")
    for key in (
        "make_doc_ms",
        "first_convert_ms",
        "second_convert_ms",
        "terminate_after_init_fresh_profile_ms",
        "terminate_after_init_existing_profile_ms",
        "third_convert_other_fresh_profile_ms",
    ):
        if key in lo:
            print(f"  {key:42} {lo[key]['p50']:8.0f}")
    print(f"  {'first-start cost (first - second convert)':42} {lo['first_start_cost_ms']:8.0f}")
    for name, made in lo["profile_in_home"].items():
        print(
            f"  {'convert, HOME profile made by ' + name:42} {made['convert_ms']['p50']:8.0f}"
            f"   saves {made['saves_ms']:.0f} (whole run {made['run_ms']['p50']:.0f})"
        )
    print(f"\nfinished in {r['seconds']} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one sample each, heavy workloads left out (<= 40 s)")
    parser.add_argument("--only", action="append", choices=sorted(WORKLOADS), help="run only this workload (repeat)")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "workloads.json")
    args = parser.parse_args()
    image = Settings().docker_image
    client = docker.DockerClient(base_url="unix:///var/run/docker.sock", version="auto", timeout=600)
    client.images.get(image)
    base = Path(tempfile.mkdtemp(prefix="se-bench-workloads-"))
    try:
        results = bench_workloads(base, client, image, args.quick, args.only)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    report(results)
    print(json.dumps(results, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(f"\nJSON: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
