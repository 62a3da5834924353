"""Helpers setup.py uses to build the C++ (not shipped in the wheel)."""
