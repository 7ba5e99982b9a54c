"""workspace layer."""
