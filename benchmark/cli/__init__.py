"""The ``fedsynth`` command line: one module per command group."""
