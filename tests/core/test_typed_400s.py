"""A 400 is classified once, by core/llm/failures.py `status_error`, into the
type its callers catch (issue 59: it was parsed as text in three places)."""

from __future__ import annotations

import pytest

from tension.core.errors import ContextLengthError, NLimitError, StatusError
from tension.core.llm.failures import status_error
from tension.core.llm.traits import n_limit

URL = "http://127.0.0.1:9/v1/chat/completions"

CONTEXT = [  # the servers' own words
    "the request exceeds the available context size, try increasing it",  # llama.cpp
    "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens "
    "(4000 in the messages, 1000 in the completion).",  # vLLM
]
N_LIMIT = [
    ("Field 'n': Value must be between 1 <= value <= 4, but got 8", 8, 4),  # llama.cpp
    ("Invalid 'n': Expected a value <= 8, but got 20", 20, 8),  # OpenAI
    ("n must be at most 16", 100, 16),
]
OTHER = ["Invalid value for 'temperature'", "messages: field required", "1 validation error"]


@pytest.mark.parametrize("message", CONTEXT)
def test_a_prompt_over_the_context_is_a_context_length_error(message):
    e = status_error(400, URL, message, "m")
    assert type(e) is ContextLengthError and isinstance(e, StatusError)  # a StatusError still: its request's
    assert e.status == 400 and e.body == message


@pytest.mark.parametrize(("message", "asked", "most"), N_LIMIT)
def test_a_400_naming_n_is_an_n_limit_error_whose_bound_is_read(message, asked, most):
    e = status_error(400, URL, message, "m")
    assert type(e) is NLimitError and isinstance(e, StatusError)
    assert n_limit(e.body, asked) == most


@pytest.mark.parametrize("message", OTHER)
def test_another_400_stays_a_plain_status_error(message):
    assert type(status_error(400, URL, message, "m")) is StatusError


def test_only_a_400_is_typed_so():
    """A 422 that names the context or n is the request's own refusal, not typed as a 400 is."""
    assert type(status_error(422, URL, CONTEXT[0], "m")) is StatusError
    assert type(status_error(422, URL, N_LIMIT[0][0], "m")) is StatusError
