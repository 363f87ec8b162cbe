"""The engine's storage step (service.engine.rounds calls `tick` every round): at most once every
SMARTUNE_STORAGE_REFRESH_S, checkpoint retention (service.storage.retention) and then the measurement of
each team's disk (service.storage.measure), so the quota checks read figures that retention has already
lowered. Folders are walked outside any transaction; a failure is logged and waits for the next period,
the round goes on."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from service.config import Settings
from service.storage import measure, retention
from service.store.db import Database, utcnow

logger = logging.getLogger(__name__)


class Keeper:
    def __init__(
        self, *, db: Database, settings: Settings, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.db, self.settings, self.clock = db, settings, clock
        self._next = float("-inf")  # the first round runs it
        self._model_runs: dict[str, str | None] = {}  # logged model folder -> its run (never changes)

    def tick(self, force: bool = False) -> bool:
        """Run the step if its period has passed (or `force`); whether it ran."""
        if not force and self.clock() < self._next:
            return False
        self._next = self.clock() + self.settings.storage_refresh_s
        try:
            retention.run(self.db, self.settings, utcnow())
        except Exception:
            logger.exception("checkpoint retention failed")
        try:
            self.measure()
        except Exception:
            logger.exception("measuring the teams' storage failed")
        return True

    def measure(self) -> None:
        with self.db.sessions() as session:
            teams, owners = measure.teams_of(session), measure.run_owners(session)
        measured = measure.measure(self.settings, teams, owners, self._model_runs)
        with self.db.write_sessions() as session, session.begin():
            measure.save(session, measured, utcnow())
