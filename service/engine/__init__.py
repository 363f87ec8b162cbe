"""The engine room: the background work of the control plane (docs/architecture.md §1-§2).

`rounds` (the engine thread and its rounds), `scheduler` (pure admission: priority, fair share, FIFO),
`pool` (the scheduler's inputs from the store), `autoscaler` (the pool an autoscaler may grow to),
`dispatch` (an attempt row, then one Ray job), `watch` (a dispatched job's Ray state), `sync` + `tracking`
(trial rows from MLflow), `outcomes` (how a job ended), `lease` (one engine among replicas), `planned_stop`
(a Ray head stopped on purpose), `ray_jobs` (the one Ray touchpoint: the Jobs API client), `local_head`
(the embedded deployment's Ray head), `head_plan` (which head: the deployment's own ports, temp dir and
token), `run_records` (what runs), `mlflow_teams` + `mlflow_admin` (each team's MLflow user and grants,
as MLflow's admin), `registered_models` (a team's registered models, read back). Each round also runs the
webhook step of `service.notify` (its notifier).

May import: the store (`service.store`), the settings and plain helpers at the service's root
(`config`, `errors`, `series`), `service.costs`, `service.storage` (its keeper: checkpoint retention and
the teams' disk), `service.notify` (webhook deliveries), `service.audits` (an audit's entrypoint),
`service.http.logs` (the job id on log lines) and `worker.contract`. Never the HTTP edge (`service.api`, `service.dashboard`, `service.main`), torch,
transformers, or Ray's and MLflow's Python runtime at import time (both are reached lazily). Importing it
starts nothing.
"""
