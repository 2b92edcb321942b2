"""Helpers several test files share (import them as ``support.models`` ...)."""
