"""A2C presets."""

from __future__ import annotations

from rljax.agents.a2c import A2CConfig
from rljax.run.presets.base import Preset
from rljax.run.presets.base import preset as _preset

PRESETS: list[Preset] = [
    _preset(
        name="cartpole-a2c",
        env_id="CartPole-v1",
        # Both learning rates held for 250k env steps (3,125 updates of 80), then linear
        # to a tenth at 1M (12,500) and a tenth from then on (docs/results.md, staying solved).
        config=A2CConfig(gae_lambda=0.95, lr_factor=((0, 1.0), (3_125, 1.0), (12_500, 0.1))),
        total_steps=500_000,
        threshold=475.0,
        key_params=("num_envs", "rollout_len", "gae_lambda", "actor_lr", "critic_lr",
                    "entropy_coef", "gamma", "lr_factor"),
        notes="reference A2C (separate actor 2x128 / critic 2x64, 5-step rollouts) with "
              "GAE(0.95) advantages: 8 of 8 seeds solve within 500k steps here, against 7 "
              "of 8 with plain 5-step returns (--set gae_lambda=none); both learning rates "
              "decay from 250k env steps to a tenth at 1M and stay there, so that seeds "
              "trained past the budget stay solved (8 of 8 at 2.5M, against 0 of 8 at "
              "constant rates)",
    ),
]

