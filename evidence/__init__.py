"""The evidence engine: raw serving records in, an honest serving study, audit and caveats out.

A pure library — no Flask, no GitHub. `evidence.build.build` is the entry point.
"""
