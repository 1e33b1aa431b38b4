"""Test support shared by the test packages (one copy of each test double)."""
