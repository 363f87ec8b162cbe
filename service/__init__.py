"""The control plane (docs/architecture.md §1–§2): REST API, job store, queue and scheduler, dispatch to Ray, trial sync
from MLflow. No torch, no transformers; of the worker only `worker.contract`. Importing it starts nothing.

Layout: `main` (the app and its lifespan), `config` (settings), `db` / `models` / `alembic` (the store),
`crud` (queries), `jobs` / `validation` (submission and cancellation), `scheduler` (pure admission logic),
`pool` (its inputs from the store), `engine` + `dispatch` + `watch` + `sync` (the background loop),
`ray_jobs` (the only Ray touchpoint), `tracking` (MLflow reads), `api/` (routes and dependencies),
`server` (`smartune serve`).
"""
