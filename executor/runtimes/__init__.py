"""runtimes layer."""
