"""The models Footnote runs, below both ingest and retrieval: the shipped MiniLM embedder,
`provider:model` specs for embeddings and chat models, the choice of embeddings an index
remembers, and embedding through the index's cache."""
