"""Evaluation: metrics registered by name (lazily)."""
