"""Benchmarks: timing and API-cost goals live here, never in timed tests."""
