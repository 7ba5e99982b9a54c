"""skill-executor: run Agent Skills safely and fast.

The package is usable as a library without the HTTP layer:

* :mod:`executor.skills`     -- parsing, validation, discovery, progressive disclosure
* :mod:`executor.workspace`  -- per-run workspaces, sessions, input staging
* :mod:`executor.runtimes`   -- where commands run (local subprocess, Docker)
* :mod:`executor.outputs`    -- output collection and MIME typing
* :mod:`executor.artifacts`  -- the versioned artifact store
* :mod:`executor.runs`       -- the skill_run pipeline tying them together
"""

__version__ = "0.1.0"
