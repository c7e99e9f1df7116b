"""Harnesses: benchmarks, soaks, the demo and the interrupt injection sweep."""
