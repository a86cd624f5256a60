"""What runs untrusted: the processes that execute a method's code or its client-side code.

- :mod:`.method_process`: an adapter's server side, with :class:`~.method_process.PoolProxy`,
  its view of the pool (derived from :mod:`benchmark.protocol.operations`);
- :mod:`.client_worker`: the loop that holds the train shards and runs client-side jobs;
- :mod:`.zygote`: the independence check's clean process, its release workers and the
  per-client processes that recompute a sampled client alone.

Each starts through :mod:`benchmark.isolation.launch`, which sandboxes it before it imports
anything here. They may import the protocol (:mod:`benchmark.protocol`), the checkpoint
format (:mod:`benchmark.checkpoints`), data-only helpers (client scopes, cost counting,
errors) and what the adapter needs (its registry, profile and context); never the trusted
side: the runner, the coordinator and client handles (:mod:`benchmark.isolation`), the
pool, its mechanisms, the independence check, the release log, the ledger or the
accountants (``tests/test_trust_domains.py``). Whatever they hold, the trusted side reads
only what the protocol carries: JSON, ``.npy`` arrays and tensor-only blobs.
"""
