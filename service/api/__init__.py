"""The REST edge: dependencies, the versioned router, one route module per resource (thin routes over
plain functions on a session).

May import every room of the service but the dashboard (`service.dashboard` sits beside it and reuses its
dependencies, not the reverse) and `worker.contract`.
"""
