"""Run by tests/engine/test_bwrap.py as an unprivileged user (a developer's laptop, a CI job): a
bwrap service that is not root runs one command and prints its result as JSON.

    python3 tests/bwrap_nonroot.py FOLDER COMMAND
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from skill_executor.config import Settings
from skill_executor.core import Executor
from skill_executor.runs.models import RunRequest


def main(folder: Path, command: str) -> None:
    skill = folder / "skills" / "probe"
    skill.mkdir(parents=True, exist_ok=True)
    (skill / "SKILL.md").write_text("---\nname: probe\ndescription: probes its sandbox\n---\n# probe\n")
    executor = Executor.from_settings(
        Settings(runtime="bwrap", skills_dirs=[folder / "skills"], data_dir=folder / "data", default_timeout=30.0)
    )
    try:
        result = executor.runner.run(
            RunRequest.model_validate({"skill": "probe", "command": command, "outputs": {"globs": ["out/*"]}})
        )
        health = executor.runtime.health()
    finally:
        executor.close()
    print(
        json.dumps(
            {
                "exit_code": result.exit_code,
                "stdout": result.stdout,
                "stderr": result.stderr,
                "files": [(f.name, f.content) for f in result.output_files],
                "health": {name: list(check) for name, check in health.items()},
            }
        )
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
