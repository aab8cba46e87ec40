"""Benchmarks: run with `invoke bench.*` (`invoke --list`); the figures measured are in
docs/development/benchmarks.md."""
