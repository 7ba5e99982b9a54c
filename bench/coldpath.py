"""The cold path: what each container setting costs in create+start+wait+remove of ``true``.

    python bench/coldpath.py [--quick] [--json FILE]

Measured with docker-py's low-level API (``create_container``/``start``/``wait``/
``remove_container``), as ``skill_executor/runtimes/docker/engine.py`` drives the engine:

* variants, each one setting added to a plain baseline (``network_mode=none``, nothing
  else): ``network_disabled`` (``NetworkDisabled``, no network mode), ``init``, a tmpfs
  ``/tmp``, 1/3/6 read-only bind mounts, log driver ``none`` (the engine's default is
  ``json-file``), read-only root, ``cap_drop=ALL`` + ``no-new-privileges``,
  memory/pids/cpu limits, ulimits, the ``runsc`` (gVisor) OCI runtime;
* our full hardened configuration exactly as :meth:`Engine.config` builds it (with a
  workspace bind mount, as a run has), with ``network_disabled`` on and off
  (``network_mode=none``) and with ``init`` on and off; and ``ours_no_init_vs_ours``, init
  off against our configuration itself as the baseline (not in ``--quick``);
* each variant's samples taken in turn with the baseline's (baseline, variant, baseline,
  ...): this machine's engine drifts by tens of percent within a minute, so only the
  ratio between samples taken side by side is fair;
* churn: runs per second of create+start+wait+remove at concurrency 4 for the baseline,
  ``network_disabled`` and our configuration (interleaved in rounds, for the same reason);
* where the time goes: create / start / wait / remove apart, baseline against ours.

Every container carries the label ``io.skill-executor.bench=coldpath`` and one of this
process's session, and every one is removed (also on failure).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import docker
from docker.types import LogConfig, Mount, Ulimit

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.run import in_turn, stats  # noqa: E402
from skill_executor.config import Settings  # noqa: E402
from skill_executor.runtimes.docker.engine import CONTAINER_WORKSPACE, Engine  # noqa: E402

LABEL = "io.skill-executor.bench"
LABEL_SESSION = f"{LABEL}.session"
PHASES = ("create", "start", "wait", "remove")

Config = dict[str, Any]


class Bench:
    """Builds the configurations and runs containers of one session."""

    def __init__(self, client: docker.DockerClient, image: str, base: Path) -> None:
        self.client = client
        self.api = client.api
        self.image = image
        self.session = uuid.uuid4().hex[:12]
        self.labels = {LABEL: "coldpath", LABEL_SESSION: self.session}
        self.base = base
        self.sources = []
        for i in range(6):  # small host dirs and files to bind read-only
            if i % 2:
                path = base / f"file{i}"
                path.write_text(f"bench {i}\n")
            else:
                path = base / f"dir{i}"
                path.mkdir()
                (path / "x").write_text("x\n")
            self.sources.append(path)
        self.workspace = base / "workspace"
        self.workspace.mkdir()
        self.settings = Settings(docker_image=image, data_dir=base / "data")
        self.engine = Engine(self.settings, client, token=f"bench-{self.session}", hosts_file=base / "hosts")

    # -- configurations ------------------------------------------------------------------

    def plain(self, network_disabled: bool = False, **host: Any) -> Config:
        """``true`` with only ``host`` settings (``network_mode=none`` unless disabled)."""
        host_config = self.api.create_host_config(network_mode=None if network_disabled else "none", **host)
        return {
            "image": self.image,
            "command": ["true"],
            "labels": dict(self.labels),
            "network_disabled": network_disabled,
            "detach": True,
            "host_config": host_config,
        }

    def binds(self, count: int) -> list[Mount]:
        return [
            Mount(f"/mnt/bench{i}", str(src), type="bind", read_only=True) for i, src in enumerate(self.sources[:count])
        ]

    def ours(self, *, network_disabled: bool = True, init: bool = True, runtime: str | None = None) -> Config:
        """:meth:`Engine.config` of a per-run container running ``true``, then edited."""
        config = self.engine.config(
            command=["true"],
            cwd=CONTAINER_WORKSPACE,
            env={"HOME": f"{CONTAINER_WORKSPACE}/run/home"},
            mounts=[Mount(CONTAINER_WORKSPACE, str(self.workspace), type="bind", read_only=False)],
            labels=dict(self.labels),
        )
        host_config = config["host_config"]
        config["network_disabled"] = network_disabled
        host_config["NetworkMode"] = "default" if network_disabled else "none"
        host_config["Init"] = init
        if runtime is not None:
            host_config["Runtime"] = runtime
        return config

    def variants(self, quick: bool) -> dict[str, tuple[Config, Config]]:
        """Name -> (configuration, its baseline): :meth:`baseline`, but for the ``*_vs_ours``
        variants our configuration (so a small difference inside it is measured directly)."""
        s = self.settings
        nofile = s.docker_nofile
        variants: dict[str, Callable[[], Config]] = {
            "network_disabled": lambda: self.plain(network_disabled=True),
            "init": lambda: self.plain(init=True),
            "tmpfs_tmp": lambda: self.plain(tmpfs={"/tmp": f"rw,nosuid,nodev,size={s.docker_tmpfs_bytes},mode=1777"}),
            "binds_1": lambda: self.plain(mounts=self.binds(1)),
            "binds_3": lambda: self.plain(mounts=self.binds(3)),
            "binds_6": lambda: self.plain(mounts=self.binds(6)),
            "log_none": lambda: self.plain(log_config=LogConfig(type="none", config={})),
            "read_only": lambda: self.plain(read_only=True),
            "caps_nnp": lambda: self.plain(cap_drop=["ALL"], security_opt=["no-new-privileges"]),
            "limits": lambda: self.plain(
                mem_limit=s.docker_memory_bytes,
                memswap_limit=s.docker_memory_bytes,
                nano_cpus=int(s.docker_cpus * 1e9),
                pids_limit=s.docker_pids_limit,
            ),
            "ulimits": lambda: self.plain(
                ulimits=[
                    Ulimit(name="nofile", soft=nofile, hard=nofile),
                    Ulimit(name="fsize", soft=s.docker_disk_bytes, hard=s.docker_disk_bytes),
                ]
            ),
            "runsc": lambda: self.plain(runtime="runsc"),
            "ours": lambda: self.ours(),
            "ours_netmode_none": lambda: self.ours(network_disabled=False),
            "ours_no_init": lambda: self.ours(init=False),
            "ours_netmode_none_no_init": lambda: self.ours(network_disabled=False, init=False),
        }
        if quick:
            keep = ("network_disabled", "init", "ours", "ours_no_init")
            variants = {name: make for name, make in variants.items() if name in keep}
        elif not self.has_runtime("runsc"):
            del variants["runsc"]
        chosen = {name: (make(), self.baseline()) for name, make in variants.items()}
        if not quick:
            chosen["ours_no_init_vs_ours"] = (self.ours(init=False), self.ours())
        return chosen

    def baseline(self) -> Config:
        return self.plain()

    def has_runtime(self, name: str) -> bool:
        return name in (self.client.info().get("Runtimes") or {})

    # -- running -------------------------------------------------------------------------

    def cold(self, config: Config, phases: dict[str, list[float]] | None = None) -> None:
        """create+start+wait+remove of one container; each phase's ms into ``phases``."""
        marks = [time.perf_counter()]
        container_id = self.api.create_container(**config)["Id"]
        try:
            marks.append(time.perf_counter())
            self.api.start(container_id)
            marks.append(time.perf_counter())
            status = self.api.wait(container_id, timeout=60)["StatusCode"]
            marks.append(time.perf_counter())
        finally:
            self.api.remove_container(container_id, force=True, v=True)
        marks.append(time.perf_counter())
        if status != 0:
            raise RuntimeError(f"the container exited with {status}: {config}")
        if phases is not None:
            for name, begin, end in zip(PHASES, marks[:-1], marks[1:], strict=True):
                phases.setdefault(name, []).append((end - begin) * 1000)

    def alternate(
        self, baseline: Config, variant: Config, count: int, pause: float, warm_up: bool = True
    ) -> tuple[list[float], list[float]]:
        """``count`` samples of each, in turn (after an unmeasured warm-up of each)."""
        if warm_up:
            self.cold(baseline)
            self.cold(variant)
        samples = in_turn(
            {"baseline": lambda: self.cold(baseline), "variant": lambda: self.cold(variant)}, count, pause
        )
        return samples["baseline"], samples["variant"]

    def churn(self, configs: dict[str, Config], concurrency: int, total: int, rounds: int) -> dict[str, Any]:
        """Runs/s at ``concurrency``: ``total`` containers per configuration, split into
        ``rounds`` interleaved rounds (a, b, c, a, b, c, ...)."""
        elapsed = {name: 0.0 for name in configs}
        done = {name: 0 for name in configs}
        per_round = max(1, total // rounds)
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            for _ in range(rounds):
                for name, config in configs.items():
                    started = time.perf_counter()
                    list(pool.map(lambda _, c=config: self.cold(c), range(per_round)))
                    elapsed[name] += time.perf_counter() - started
                    done[name] += per_round
        return {name: {"runs_per_s": done[name] / elapsed[name], "containers": done[name]} for name in configs}

    def phases(self, configs: dict[str, Config], count: int, pause: float) -> dict[str, Any]:
        """Per-phase ms of each configuration, samples taken in turn."""
        samples: dict[str, dict[str, list[float]]] = {name: {} for name in configs}
        for _ in range(count):
            for name, config in configs.items():
                time.sleep(pause)
                self.cold(config, samples[name])
        return {
            name: {phase: stats(values) for phase, values in by_phase.items()} for name, by_phase in samples.items()
        }

    def leftovers(self) -> list[str]:
        found = self.api.containers(all=True, filters={"label": f"{LABEL_SESSION}={self.session}"})
        return [str(c["Id"]) for c in found]

    def cleanup(self) -> None:
        for container_id in self.leftovers():
            try:
                self.api.remove_container(container_id, force=True, v=True)
            except docker.errors.NotFound:
                pass


def bench_coldpath(
    client: docker.DockerClient, image: str, quick: bool, only: set[str] | None = None
) -> dict[str, Any]:
    """Every variant (or those in ``only``) against its baseline, churn at concurrency 4
    and the phase split."""
    count, pause = (3, 0.05) if quick else (15, 0.2)
    with tempfile.TemporaryDirectory(prefix="coldpath-") as tmp:
        bench = Bench(client, image, Path(tmp))
        try:
            result: dict[str, Any] = {
                "session": bench.session,
                "image": image,
                "quick": quick,
                "log_driver_default": client.info().get("LoggingDriver"),
            }
            baseline = bench.baseline()
            bench.cold(baseline)  # the first container of an image may pay for more than the rest
            for name, (config, against) in bench.variants(quick).items():
                if only is not None and name not in only:
                    continue
                base_samples, samples = bench.alternate(against, config, count, pause, warm_up=not quick)
                ms, base_ms = stats(samples), stats(base_samples)
                result[name] = {"ms": ms, "baseline_ms": base_ms, "ratio": ms["p50"] / base_ms["p50"]}
            churn_configs = {
                "baseline": baseline,
                "network_disabled": bench.plain(network_disabled=True),
                "ours": bench.ours(),
            }
            total, rounds = (4, 1) if quick else (40, 4)
            result["churn_c4"] = bench.churn(churn_configs, concurrency=4, total=total, rounds=rounds)
            result["phases"] = bench.phases(
                {"baseline": baseline, "ours": bench.ours()}, count=2 if quick else 10, pause=pause
            )
            return result
        finally:
            bench.cleanup()


def report(result: dict[str, Any]) -> None:
    print(
        f"cold path: create+start+wait+remove of `true` ({result['image']}; "
        f"default log driver {result['log_driver_default']})"
    )
    print(f"{'variant':28} {'p50':>8} {'p90':>8} {'base p50':>9} {'base p90':>9} {'ratio':>6} {'delta':>7} {'n':>3}")
    for name, row in result.items():
        if not (isinstance(row, dict) and "ratio" in row):
            continue
        ms, base = row["ms"], row["baseline_ms"]
        print(
            f"{name:28} {ms['p50']:8.0f} {ms['p90']:8.0f} {base['p50']:9.0f} {base['p90']:9.0f} "
            f"{row['ratio']:6.2f} {ms['p50'] - base['p50']:+7.0f} {ms['n']:3}"
        )
    print("\nchurn at concurrency 4 (runs/s)")
    for name, row in result["churn_c4"].items():
        print(f"  {name:26} {row['runs_per_s']:6.2f}  ({row['containers']} containers)")
    print("\nphases p50 ms (p90)")
    print(f"  {'':12}" + "".join(f"{phase:>16}" for phase in PHASES))
    for name, by_phase in result["phases"].items():
        cells = "".join(f"{by_phase[p]['p50']:9.0f} ({by_phase[p]['p90']:4.0f})" for p in PHASES)
        print(f"  {name:12}{cells}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a few samples of the main variants (<= 25 s)")
    parser.add_argument("--only", help="comma-separated variants to measure (default: all)")
    parser.add_argument("--json", type=Path, help="also write the result as JSON to this file")
    args = parser.parse_args()
    client = docker.DockerClient(base_url="unix:///var/run/docker.sock", version="auto", timeout=120)
    image = Settings().docker_image
    started = time.monotonic()
    result = bench_coldpath(client, image, args.quick, set(args.only.split(",")) if args.only else None)
    result["elapsed_s"] = time.monotonic() - started
    report(result)
    print(f"\n({result['elapsed_s']:.0f} s)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
