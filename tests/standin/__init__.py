"""A strict GitHub stand-in for the App's end-to-end tests.

Fake GitHub at the HTTP boundary only, fail on any unexpected request, validate every
request against GitHub's published REST description, and use GitHub's published webhook
examples. The pinned descriptions are fetched on first use (``tests/fetch_github_fixtures.py``).

A conftest fixture is three lines::

    @pytest.fixture
    def github() -> Iterator[GitHubStandIn]:
        with serve() as gh:
            yield gh
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.standin.github import GitHubStandIn, iter_routes
from tests.standin.openapi import OpenAPI
from tests.standin.payloads import example, load_examples, sign
from tests.standin.state import DEFAULT_PERMISSIONS, DEFAULT_RUN_NAME, RecordedRequest

__all__ = [
    "DEFAULT_PERMISSIONS",
    "DEFAULT_RUN_NAME",
    "GitHubStandIn",
    "OpenAPI",
    "RecordedRequest",
    "example",
    "iter_routes",
    "load_examples",
    "serve",
    "sign",
]


@contextmanager
def serve(**options: Any) -> Iterator[GitHubStandIn]:
    """A running stand-in that is checked when the block ends without an exception.

    Unchecked fakes hide bugs, so a block that completes calls :meth:`assert_clean`;
    the server is stopped in every case.
    """
    standin = GitHubStandIn(**options).start()
    try:
        yield standin
        standin.assert_clean()
    finally:
        standin.stop()
