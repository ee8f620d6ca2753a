"""What the tests may assume of the backend they run on."""

import jax

ON_CPU = jax.default_backend() == "cpu"

# A vmapped (many seeds, sweep members) and a single program reduce in different orders on
# GPUs, so their float32 parameters agree to rounding after a few hundred updates, not to
# XLA:CPU's bit-near equality.
# On GPUs without TF32 (the suite asks for "highest" matmul precision) the reductions still
# run in other orders, so the tolerances there are ten times XLA:CPU's.
MEMBER_ATOL = 1e-6 if ON_CPU else 1e-4
MEMBER_RTOL = 1e-5 if ON_CPU else 1e-4
