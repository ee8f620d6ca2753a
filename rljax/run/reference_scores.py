"""Random-policy and reference scores per task, for normalised aggregates
(``rljax report --normalize``): 0 is the random policy, 1 the reference.

Random scores were measured with ``python -m benchmarks.random_baseline TASK`` (uniform
random actions; the record of each measurement is in
``benchmarks/results/random_scores.json``); the published ones say where they come from.
Reference scores are either the task's own ceiling or threshold, or a published figure at a
stated budget, with its source. A task that is missing here needs its scores given by the
user (``--normalize SCORES.json``).
"""

from __future__ import annotations

from typing import NamedTuple


class TaskScores(NamedTuple):
    random: float
    random_source: str
    reference: float
    reference_source: str


_MEASURED = "benchmarks/random_baseline.py, uniform random actions"
_CARTPOLE_MAX = "the maximum return: 500 steps of reward 1 (CartPole-v1's time limit)"
_BLINES = "gymnax-blines PPO checkpoint at 10M env steps (RobertTLange/gymnax-blines)"

# Random scores of CartPole and Acrobot: the gymnax measurement (the same dynamics and time
# limit as the Gymnasium task envpool runs).
SCORES: dict[str, TaskScores] = {
    "gymnax:CartPole-v1": TaskScores(22.09, _MEASURED, 500.0, _CARTPOLE_MAX),
    "CartPole-v1": TaskScores(22.09, _MEASURED + " on gymnax:CartPole-v1", 500.0,
                              _CARTPOLE_MAX),
    "gymnax:Acrobot-v1": TaskScores(-498.79, _MEASURED, -100.0,
                                    "Gymnasium's reward threshold for Acrobot-v1"),
    "Acrobot-v1": TaskScores(-498.79, _MEASURED + " on gymnax:Acrobot-v1", -100.0,
                             "Gymnasium's reward threshold for Acrobot-v1"),
    "gymnax:Breakout-MinAtar": TaskScores(0.42, _MEASURED, 28.0, _BLINES),
    "gymnax:Asterix-MinAtar": TaskScores(0.51, _MEASURED, 15.0, _BLINES),
    "gymnax:Freeway-MinAtar": TaskScores(0.26, _MEASURED, 58.0, _BLINES),
    "gymnax:SpaceInvaders-MinAtar": TaskScores(4.12, _MEASURED, 131.0, _BLINES),
    "Reacher-v5": TaskScores(-42.90, _MEASURED, -3.75,
                             "Gymnasium's reward threshold for Reacher-v5"),
    "Breakout-v5": TaskScores(1.7, "Mnih et al. 2015 (Nature), random agent", 430.1,
                              "CleanRL PPO envpool-XLA, 10M env steps (Huang et al. 2022)"),
}
