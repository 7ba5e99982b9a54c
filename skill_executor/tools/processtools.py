"""The ``process_*`` tools: start, write to, poll and kill a session's interactive processes."""

from __future__ import annotations

from typing import Any

from ..errors import BadRequest
from ..processes.base import Processes, ProcessView
from .arguments import text_argument
from .budget import ResultBudget
from .neutral import MAX_GROWTH, neutralise
from .results import ToolResult


def process_tool(
    processes: Processes | None, name: str, arguments: dict[str, Any], tenant: str, budget: ResultBudget
) -> ToolResult:
    """A ``process_*`` call in ``tenant``'s session (None: the tools are unavailable); the polled
    output neutralised, the state beside it (the result's status), never a line inside it."""
    if processes is None:
        raise BadRequest(f"{name} is not available here", code="tool_unavailable")
    allowed = {
        "process_start": {"session", "command", "pty", "timeout", "idle_timeout"},
        "process_write": {"session", "process", "data", "eof"},
        "process_poll": {"session", "process", "after", "wait"},
        "process_kill": {"session", "process", "signal"},
    }[name]
    unknown = set(arguments) - allowed
    if unknown:
        raise BadRequest(f"unknown argument(s) for {name}: {', '.join(sorted(unknown))}", code="invalid_arguments")
    session = text_argument(arguments, "session")
    if name == "process_start":
        pty, timeout, idle = arguments.get("pty", False), arguments.get("timeout"), arguments.get("idle_timeout")
        if not isinstance(pty, bool) or not all(v is None or _is_number(v) for v in (timeout, idle)):
            raise BadRequest("'pty' must be a boolean and the timeouts numbers", code="invalid_arguments")
        started = processes.start(
            tenant, session, text_argument(arguments, "command"), pty=pty, timeout=timeout, idle_timeout=idle
        )
        return _process_result(name, f"started process {started.id} in session {session!r}", started)
    process_id = text_argument(arguments, "process")
    if name == "process_write":
        data, eof = arguments.get("data"), arguments.get("eof", False)
        if not isinstance(data, str) or not isinstance(eof, bool):
            raise BadRequest("'data' must be a string and 'eof' a boolean", code="invalid_arguments")
        written = processes.write(tenant, session, process_id, data.encode(), eof=eof)
        closed = " and closed its stdin" if eof else ""
        return _process_result(name, f"wrote {len(data.encode())} bytes to {process_id}{closed}", written)
    if name == "process_kill":
        signal = arguments.get("signal", "KILL")
        if not isinstance(signal, str):
            raise BadRequest("'signal' must be a string", code="invalid_arguments")
        if signal.upper().removeprefix("SIG") == "KILL":
            killed = processes.kill(tenant, session, process_id)
            return _process_result(name, f"killed {process_id} ({_ending(killed)})", killed)
        signalled = processes.signal(tenant, session, process_id, signal)
        return _process_result(name, f"sent {signal.upper()} to {process_id}", signalled)
    after, wait = arguments.get("after", 0), arguments.get("wait", 2)
    if not isinstance(after, int) or isinstance(after, bool) or after < 0 or not _is_number(wait):
        raise BadRequest("'after' must be an offset (>= 0) and 'wait' seconds", code="invalid_arguments")
    limit = max(256, budget.max_chars - 400)  # the rest is for the next poll: nothing is cut
    polled = processes.poll(tenant, session, process_id, after=after, limit=limit, wait=float(wait))
    output = neutralise(polled.output)
    if len(output) > limit:  # escapes grew it past the budget: less of it now, the rest next poll
        polled = processes.poll(tenant, session, process_id, after=after, limit=max(64, limit // MAX_GROWTH))
        output = neutralise(polled.output)
    state = "running" if polled.running else f"ended: exit code {polled.exit_code} ({polled.reason})"
    lost = f"; {polled.dropped} bytes before were dropped (the output ring is full)" if polled.dropped else ""
    more = "; more output waits: poll again" if polled.next < polled.total else ""
    empty = "" if output else "; no new output"
    status = f"[{process_id} {state}; next offset {polled.next} of {polled.total}{lost}{more}{empty}]"
    data = {
        "output": output,
        "offset": polled.offset,
        "next": polled.next,
        "total": polled.total,
        "dropped": polled.dropped,
        "running": polled.running,
        "exit_code": polled.exit_code,
        "reason": polled.reason,
    }
    # The output (neutralised: no escape is interpreted) is the content; the state is not a
    # line inside it, which the output could imitate, but the result's status and data.
    return ToolResult(name, output, False, data, status=status)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def _ending(process: ProcessView) -> str:
    return "still ending" if not process.ended else f"exit code {process.exit_code}"


def _process_result(name: str, text: str, process: ProcessView) -> ToolResult:
    return ToolResult(name, text, False, process.state())
