"""The rljax version (a core module: anything may import it)."""

__version__ = "0.1.0"
