"""The control plane (docs/architecture.md §1-§2): REST API, job store, queue and scheduler, dispatch to Ray, trial
sync from MLflow. No torch, no transformers; of the worker only `worker.contract`. Importing it starts nothing.

Rooms, each with a docstring that names what it may import (tests/test_boundaries.py checks them):
- the HTTP edge: `main` (the app and its lifespan), `server` (`smartune serve`), `api/` (REST routes and
  their dependencies), `http/` (middleware: logs, metrics, rate limits, headers), `dashboard/` (pages);
- the engine: `engine/` (scheduling, dispatch, watching, reconciliation, leases, the Ray Jobs adapter);
- the store: `store/` (tables, sessions, queries, migrations);
- the domain between them: `jobs` / `validation` (submission, cancellation, retry), `audits`,
  `datasets/`, `costs/` (estimates and budgets), `notify/` (webhooks: URL checks, signatures,
  deliveries), and the plain helpers `config` (the one settings class), `errors`, `schemas`, `security`,
  `secret_checks`, `limits`, `series`.
"""
