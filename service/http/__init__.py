"""The HTTP layer around the routes: rate limits, security headers and CORS, the OpenAPI document."""
