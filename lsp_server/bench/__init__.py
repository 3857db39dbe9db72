"""Benchmark harness: datasets, runners, reports and plots."""
