"""The pool's mechanisms, one module each: what a release computes from the clients' rows
and what the ledger records for it.

Each module holds one mechanism's operation(s) of :class:`~benchmark.federation.pool.ClientPool`
(bound to the pool by the operation table, :mod:`benchmark.operations`), written in
three parts: the checked parameters, the **ledger entry** built from them before any client
code runs (the budget admits it first), and the **noised value** computed from the rows
the pool hands over, clipped (as in pfl-research's mechanism / accountant split: the
mechanism never accounts, the accountant never sees rows). The pool keeps what every
mechanism shares: sampling, the client executor, the independence check, the release log
and the ledger writes. The algorithms a mechanism runs (the Bingham sampler, the harness's
DP-SGD loops, the tree) stay in their own modules under :mod:`benchmark.federation`.
"""
