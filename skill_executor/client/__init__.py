"""A small client for the skill-executor HTTP API (httpx; sync and async).

    from skill_executor.client import Client
    with Client("http://127.0.0.1:8080", api_key="...") as client:
        print(client.list_skills()["skills"])
        result = client.run({"skill": "math-tools", "command": "python3 scripts/fib.py 10"})

Every non-2xx answer raises :class:`ApiError` with the service's error code.

Both clients share one core: each operation is described once as a :class:`Call`
(method, quoted path, parameters, body, how to read the answer) by :class:`Calls`;
:class:`Client` and :class:`AsyncClient` only send calls and map errors, in the same
way (:func:`raise_for`), and parse Server-Sent Events with the same parser.  (The
module is long only because each client lists every operation once, as httpx does.)
"""

from skill_executor_client.calls import ApiError, Call, Calls, raise_for
from skill_executor_client.transfer import folder_files

from .aio import AsyncClient
from .sync import Client

__all__ = ["ApiError", "AsyncClient", "Call", "Calls", "Client", "folder_files", "raise_for"]
