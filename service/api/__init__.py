"""The HTTP layer: dependencies, the versioned router, one route module per resource."""
