"""rljax: deep reinforcement-learning agents as pure JAX functions."""

__version__ = "0.1.0"
