"""The generated ``process.v1`` classes that ship in the ``k8s-agent-sandbox`` wheel.

Loaded the way the SDK's own ``commands/_process_stubs.py`` loads them (its ``_proto`` folder on
``sys.path``, then ``process.v1``), without importing the SDK package itself, whose top level
needs ``kubernetes``: the image installs the wheel ``--no-deps`` for these classes only.  Loading
them under the same module names as the SDK keeps one registration of the proto file when both
are in one process (the tests).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from types import ModuleType


class StubsMissing(Exception):
    """The SDK wheel (or grpcio/protobuf) is not installed where this Python looks."""


def load() -> tuple[ModuleType, ModuleType]:
    """``(process_pb2, process_pb2_grpc)``."""
    spec = importlib.util.find_spec("k8s_agent_sandbox")  # a top-level name: not imported
    if spec is None or not spec.submodule_search_locations:
        raise StubsMissing("the k8s-agent-sandbox wheel is not installed (it carries process.v1's classes)")
    proto = os.path.join(next(iter(spec.submodule_search_locations)), "_proto")
    if not os.path.isdir(os.path.join(proto, "process", "v1")):
        raise StubsMissing(f"no generated process.v1 classes under {proto}")
    if proto not in sys.path:
        sys.path.insert(0, proto)
    try:
        pb2 = importlib.import_module("process.v1.process_pb2")
        pb2_grpc = importlib.import_module("process.v1.process_pb2_grpc")
    except ImportError as exc:
        raise StubsMissing(f"cannot load process.v1's generated classes: {exc}") from None
    return pb2, pb2_grpc
