"""Numbers, tables and figures from saved files; no LLM: curve and fair-play metrics,
report and compare."""
