"""Service tests: the app with fake Ray and MLflow (fixtures in tests/service/fixtures.py)."""

from tests.service.fixtures import *  # noqa: F403
