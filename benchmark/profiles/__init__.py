"""Model profiles: tiny (tests), cpu (offline quickstart), paper (hub models on a GPU)."""
