"""Talking to OpenAI-compatible servers: the wire protocol, the HTTP client with retries,
replicas and their router, Prometheus metrics, and the one cached chat call. Knows
nothing about stories."""
