"""datasets_builders package."""
