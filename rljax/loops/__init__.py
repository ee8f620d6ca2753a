"""Compiled training loops: on-policy, off-policy (with replay memory), evaluation.

Importing them lowers JAX's random-number hash without a loop on CPU
(:mod:`rljax.threefry`: the same numbers, fewer kernels per env step).
"""

from rljax import threefry

threefry.install()
