"""`make bench`: the benchmarks of gpuallocd, printed as one table (see docs/performance.md)."""
