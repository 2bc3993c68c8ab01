"""The answer graph: state, context, prompts, nodes, the search tool, and its wiring."""

import warnings

# ToolRuntime hands the graph's dataclass state and context (or a host's own context object)
# to a pydantic schema typed as dicts; the values arrive intact, but pydantic warns on every
# tool call. Silence only that warning.
warnings.filterwarnings(
    "ignore", message=r"Pydantic serializer warnings:\s+PydanticSerializationUnexpectedValue"
)
