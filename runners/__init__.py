"""What runs on the self-hosted GPU runner (standard library only; see issue #5).

`python3 -m runners verify …` (or the `rsi-runner` console script) measures base and head
of one change on one machine and writes a bundle (shared/design/bundle.md).
"""

__version__ = "1.0"
