"""One module per public source."""
