"""Test doubles shared by the tests and the benchmarks, importable as `tension.testing`
(pyproject maps it to tests/testing/):

- `tension.testing.openai_server`: `LoopbackServer`, a deterministic vLLM-flavoured
  OpenAI-compatible server (``python -m tension.testing.openai_server`` as a process);
- `tension.testing.inprocess`: `InProcessServer`, the same answers without a socket,
  both doors to one fake answer model (`tension.testing.answers` and its parts, whose
  settings are `tension.testing.settings`' `AnswerSettings` and `WireSettings`);
- `tension.testing.stub_server`: bench's minimal, fast stub (``python -m
  tension.testing.stub_server``), and `start_stub` to run it as a child process;
- `tension.testing.corpus`: synthetic stories (`write_story`, `make_corpus`).

It may import `tension.core` and the others; nothing in core/, kernels/ or cache/
imports it (tests/test_layers.py)."""
