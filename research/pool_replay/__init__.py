"""A short replay through a real multi-node Ray cluster and `smartune serve`, with sleeping trials, checked
against research/pool_sim's simulation of the same workload.

`workload` draws the jobs and turns each into a job spec, `sleep_sweep` is the sweep driver the server
dispatches (trials `sleeper` sleep instead of train), `cluster` starts and stops the real stack, `real`
submits the jobs over REST and reads back their times, `compare` measures the real path's overheads, runs
the simulation and compares the two, and `__main__` writes research/results/pool_replay.json.
"""
