"""What crosses the trust boundary: the one package both sides import.

The trusted side (the coordinator, :mod:`benchmark.isolation`, and the pool,
:mod:`benchmark.federation`) and the untrusted processes (:mod:`benchmark.untrusted`)
speak through :mod:`.operations` (the pool's operations, declared once: the method side's
proxy and the coordinator's dispatcher are both derived from it). It imports nothing of
either side.
"""
