"""Service tests: the app with fake Ray and MLflow (fixtures in tests/service/fixtures.py)."""

from tests.service.fixtures import *  # noqa: F403
from tests.service.webhook_utils import receiver  # noqa: E402, F401  (the webhook tests' fake receiver)
