"""Serving Footnote to a team: who a caller is and what they may choose (credentials, auth,
settings), the chat page and its routes, and the two runtimes that host the graph: LangGraph's
development server (`langgraph_dev`) and the production deployment on Aegra (`production`)."""
