"""Federation: the client pool, the only way server-side code reaches private data."""
