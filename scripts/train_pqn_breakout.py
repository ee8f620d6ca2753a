"""Reproduces the Breakout PQN reference run (``breakout-pqn``: the PQN paper's Atari
configuration, 10M env steps) or its labelled 1M-step CPU demonstration
(``breakout-pqn-1m``).

    python scripts/train_pqn_breakout.py [--preset breakout-pqn-1m] [--seeds 1] [--seed 0]
                                         [--target 10] [--total-steps N] [--logdir runs]
                                         [--plot docs/breakout-pqn.png] [--resume RUN_DIR]

Prints, per seed, the env step at which the 100-episode mean game score first reached
``--target`` and the final mean, then the wall time; exits non-zero unless every seed
reached the target. Several seeds train as one program (``--seeds``).
"""

from __future__ import annotations

import sys

from _report import breakout_main

if __name__ == "__main__":
    sys.exit(breakout_main(__doc__, ["breakout-pqn", "breakout-pqn-1m"]))
