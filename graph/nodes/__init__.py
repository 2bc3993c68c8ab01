"""The answer graph's nodes, one group per step of its picture (graph/graph.py wires them).

Each model role has an LLM path and a deterministic offline path. The turn (`turn.py`:
new_question, plan_turn, reply, research, global_answer; `answer.py`: generate,
verify_citations) works on `State`; one part's research (`research.py`: rewrite_query,
call_retriever, web_search; `grading.py`: grade_documents; `hop.py`: plan_hop) on
`PartState`, once per part, in parallel. `routes.py` holds the edges' decisions;
`messages.py` and `schemas.py` what the nodes read of the conversation and ask of a model;
`base.py` the models and helpers every group shares.
"""
