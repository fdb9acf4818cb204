"""The conformance suite shares the integration fixtures (engine, allowed root, owner label)."""

from tests.integration.conftest import *  # noqa: F403
