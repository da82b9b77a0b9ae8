"""Benchmarks: measured side by side with their peer in one run, printed as ratios, never asserted."""
