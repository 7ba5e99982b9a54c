"""The MCP server (stdio and streamable HTTP): skills by SEP-2640, tools that run them."""
