"""The LMDB store of every LLM result."""
