"""A registry module that fails while it is imported, as a user's half-written module would."""

raise RuntimeError("half-written module")
