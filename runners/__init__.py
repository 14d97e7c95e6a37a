"""What runs on the self-hosted GPU runner (standard library only).

`python3 -m runners verify …` (or the `rsi-runner` console script) measures base and head
of one change on one machine and writes a bundle (its format: docs/bundle.md in rsi-bot).
"""

__version__ = "1.0"
