"""Placeholder for the warm-pool launcher (see the performance issue)."""
