"""The HTTP layer around the routes: rate limits, security headers and CORS, the OpenAPI document, logs
and metrics.

May import the store, the engine's read-only views (`pool`, `scheduler`) and the plain helpers at the
service's root; never the routes (`service.api`, `service.dashboard`).
"""
