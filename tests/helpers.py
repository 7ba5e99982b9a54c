"""Small builders shared by the tests."""

from __future__ import annotations

from pathlib import Path


def make_skill(root: Path, dirname: str, frontmatter: str, body: str = "# Body\n", *, filename: str = "SKILL.md",
               raw: bytes | None = None) -> Path:
    """Write a skill directory; ``frontmatter`` is the YAML between the ``---`` lines."""
    directory = root / dirname
    directory.mkdir(parents=True, exist_ok=True)
    data = raw if raw is not None else f"---\n{frontmatter.strip(chr(10))}\n---\n{body}".encode()
    (directory / filename).write_bytes(data)
    return directory
