"""Preflight: what a skill needs from its image, and whether the image has it.

:func:`diagnose` scans the skill (:mod:`skill_executor.preflight`, static), then runs ONE
probe in the sandbox through the normal run pipeline -- so the skill's own environment
is part of the answer -- that looks for every command (``shutil.which``, as
``command -v``), Python module (``importlib.util.find_spec`` over the run's import path:
the skill folder, the run's ``PYTHONPATH``, the image's site-packages) and Node module
(``require.resolve`` from the skill folder with the run's ``NODE_PATH``), and prints JSON.

Nothing of the skill runs in the probe: Python starts isolated (``python3 -I -S``: no
``PYTHONPATH``, working directory or user site on its own path, so no ``sitecustomize.py``,
``json.py`` or ``.pth`` of the skill is imported), adds the image's site-packages itself
and looks the skill's paths up as data; Node starts from ``/`` with only ``PATH`` and
``NODE_PATH``.  The names come from untrusted skills: they travel as JSON on the probe's
stdin, never through a shell.  The answer is untrusted data too (:func:`parse_answer`:
bounded, strictly typed, exactly the names asked); anything else is a failed probe -- a
``doctor_probe_failed`` finding and ``ok: false``, never trusted and never a 5xx.

The package, by job: :mod:`.diagnose` (the front), :mod:`.probe` (the probe and its answer),
:mod:`.report` (the report from both), :mod:`.model` (its shape), :mod:`.table` (for people).
"""

from .diagnose import diagnose
from .model import DoctorFinding, DoctorReport
from .probe import PROBE_FAILED, parse_answer
from .report import report
from .table import render_table

__all__ = ["PROBE_FAILED", "DoctorFinding", "DoctorReport", "diagnose", "parse_answer", "render_table", "report"]
