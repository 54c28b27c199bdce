"""The single place that states trnlang's version (pyproject.toml repeats it; a test checks they agree)."""

__version__ = "0.1.0"
