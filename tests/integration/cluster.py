"""Moved to bench/cluster.py (shared with the load benchmark); this name stays while callers move."""

from bench.cluster import *  # noqa: F403
from bench.cluster import Postgres, RayHead, Server, make_server, start_postgres, start_ray_head  # noqa: F401
