"""Property tests of the HTTP API against its own OpenAPI schema (schemathesis): no input gives a 5xx.

Every operation of the live server's /openapi.json gets hypothesis-generated requests, valid and invalid
(wrong types, out-of-range numbers, odd Unicode, missing and extra fields); the server must answer each
with a JSON body and a status below 500 (503 only means busy, never broken).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.generation import GenerationMode
from serving_helpers import auth, running_server

from seqlab.serving.app import ServerConfig


@pytest.fixture(scope="module")
def api(word_run_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    config = ServerConfig(word_run_dir, min_confidence=0.0, log_dir=tmp_path_factory.mktemp("serve-log"))
    with running_server(config) as url:
        yield url, auth(config)


def test_no_input_gives_a_server_error(api: tuple[str, dict[str, str]]) -> None:
    """With the token, as the person's page calls it: what the gate lets through never breaks a route."""
    api_url, headers = api
    schema = schemathesis.openapi.from_url(f"{api_url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {f"{op.method.upper()} {op.path}" for op in operations} >= {"POST /v1/complete", "POST /v1/events",
                                                                      "GET /v1/stats", "GET /health"}
    calls = 0
    statuses: set[tuple[str, int]] = set()
    for op in operations:
        # valid requests, and for the operations that take a body also invalid ones (wrong types, values
        # out of range, missing or extra fields)
        strategy = op.as_strategy(GenerationMode.POSITIVE)
        if op.method.lower() == "post":
            strategy = strategy | op.as_strategy(GenerationMode.NEGATIVE)

        @given(case=strategy)
        @settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        def check(case: schemathesis.Case) -> None:
            nonlocal calls
            response = case.call(base_url=api_url, timeout=30, headers=headers)
            calls += 1
            statuses.add((case.path, response.status_code))
            assert response.status_code < 500 or response.status_code == 503, (
                f"{case.method} {case.path} -> {response.status_code}: {response.text[:300]}")
            content_type = response.headers.get("content-type") or [""]  # schemathesis lists header values
            assert content_type[0].startswith("application/json"), f"{case.method} {case.path}: {content_type}"

        check()
    assert calls >= 4 * 10
    # both kinds of input were tried: answered ones and refused ones
    assert {("/v1/complete", 200), ("/v1/complete", 422)} <= statuses, sorted(statuses)
