"""RocketStore command-line tools (the ``rocketstore`` console script)."""
