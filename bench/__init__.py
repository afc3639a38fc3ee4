"""Benchmarks: measured runs that print tables, not tests."""
