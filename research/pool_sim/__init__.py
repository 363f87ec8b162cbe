"""A simulated week of a team-shared GPU pool, replayed through the control plane's own scheduler.

`workload` draws the week (teams, arrivals, job shapes, trial durations) from a documented distribution,
`cluster` places trials on nodes as Ray would, `simulate` runs the event loop around
`service.engine.scheduler.plan` and `service.engine.pool.concurrency` on a simulated clock, `measures` turns the
trace into utilisation, waits and fairness, and `__main__` writes research/results/pool_sim.json.
"""
