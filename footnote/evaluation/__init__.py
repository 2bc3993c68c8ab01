"""`footnote eval`: retrieval stages and whole answers measured on BEIR-layout datasets."""
