"""Shared pytest configuration; broker fixtures live in tests/fixtures_brokers.py."""
