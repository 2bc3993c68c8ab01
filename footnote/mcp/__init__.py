"""MCP for Footnote: the tools (tools.py), served at /mcp (http.py) and over stdio (stdio.py)."""
