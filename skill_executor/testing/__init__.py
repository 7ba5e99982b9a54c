"""Testing skills: the ``tests/skill-tests.yaml`` format, its runner, reports and the pytest plugin."""
