"""Settings for the whole test suite; makes ``_backend`` importable under
``--import-mode=importlib``, which does not put test folders on ``sys.path``."""

import pathlib
import sys

import jax

_HERE = str(pathlib.Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

# The tests compare against float64 NumPy references. On GPUs, float32 matmuls and
# convolutions default to TF32 inputs (about 1e-3 relative error), so ask for full float32
# there (XLA:CPU computes float32 dots in full precision either way).
jax.config.update("jax_default_matmul_precision", "highest")
