"""artifacts layer."""
