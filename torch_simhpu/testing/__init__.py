"""Test machinery for operator authors: the tests codegen generates from an
entry's `reference:` (reference_tests.py)."""
