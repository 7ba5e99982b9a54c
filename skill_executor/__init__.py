"""skill-executor: run Agent Skills safely and fast.

The package is usable as a library without the HTTP layer:

* :mod:`skill_executor.skills`     -- parsing, validation, discovery, progressive disclosure
* :mod:`skill_executor.workspace`  -- per-run workspaces, sessions, input staging
* :mod:`skill_executor.runtimes`   -- where commands run (local subprocess, Docker)
* :mod:`skill_executor.outputs`    -- output collection and MIME typing
* :mod:`skill_executor.artifacts`  -- the versioned artifact store
* :mod:`skill_executor.runs`       -- the skill_run pipeline tying them together
"""

__version__ = "0.1.0"
