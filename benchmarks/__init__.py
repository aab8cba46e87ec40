"""Benchmarks: run with `invoke bench.convert` and `invoke bench.input`; figures in README."""
