"""The tools the server runs for a response, in one loop (loop): each kind of call one module
behind one small interface (kind): MCP tools (mcp, with the link to a server: mcp_link, through
the egress guard: mcp_transport) and file search (file_search)."""
