"""The ``skill-executor`` command line."""
