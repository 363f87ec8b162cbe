"""One router per resource, each with its own prefix and tag."""
