"""Runnable examples: ``python -m tapegrad.examples.digits``."""
