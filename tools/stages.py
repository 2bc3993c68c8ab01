"""The names of the retrieval stages, in a module light enough for the command line's parser.

bm25 -> keyword scores        dense -> embedding similarity
hybrid -> fused (RRF)         reranked, prf -> variants measured by `footnote eval`
pipeline -> what `footnote ask` uses by default
graph -> a walk over the entity graph from the pipeline (tools/graph_search.py)
"""

from typing import Literal

Stage = Literal["bm25", "dense", "hybrid", "reranked", "prf", "pipeline", "graph"]
STAGES: tuple[Stage, ...] = ("bm25", "dense", "hybrid", "reranked", "prf", "pipeline", "graph")
"""Every stage `tools.search.run_stage` can run, so evaluation reports each one."""
