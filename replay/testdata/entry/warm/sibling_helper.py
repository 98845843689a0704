"""Imported by step.py from its own directory (sys.path[0])."""

VALUE = 42
