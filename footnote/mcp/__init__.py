"""MCP for Footnote: the tools (tools.py) and their stdio server (stdio.py); the served
endpoint at /mcp is the server's (footnote/server/mcp_route.py), which runs these tools."""
