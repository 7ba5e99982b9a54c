"""What both HTTP front ends (the REST API in :mod:`skill_executor.api` and MCP's streamable HTTP
in :mod:`skill_executor.mcp.http`) share, below both: who is calling (:mod:`.auth`: API keys,
bearer tokens, the bind check) and how an error is answered (:mod:`.problems`)."""
