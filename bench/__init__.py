"""Benchmarks: `make bench` runs them all (see bench/run_all.py). Figures go to bench/results/."""
