"""Privacy layer: the ledger of noisy releases, the accountants that turn it into ε, and errors."""
