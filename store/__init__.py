"""The store layer: where chunks, vectors and keyword indexes live (see store/base.py)."""
