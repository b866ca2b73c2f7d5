"""Keybus benchmark harness: scenarios, a broker launcher, and RESULTS.md."""
