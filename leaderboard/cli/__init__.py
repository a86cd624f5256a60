"""The leaderboard's ``fedsynth`` commands (``leaderboard``, ``suite``, ``quickstart``,
``submit``), added to the core's command group through the ``fedsynth.commands`` entry
points declared in pyproject.toml."""
