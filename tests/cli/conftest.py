"""CLI tests use the service tests' fixtures (an app with fake Ray and MLflow) where they need a server."""

from tests.service.fixtures import *  # noqa: F403
