"""The MCP servers a response's `mcp` tools name: the link to one (server_link, through the
egress guard: guarded_transport) and the loop that lists, calls and answers (loop)."""
