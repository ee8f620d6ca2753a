"""Pure loss and return functions, per transition or per sequence."""

from rljax.losses.policy_gradient import entropy_loss
from rljax.losses.policy_gradient import masked_mean
from rljax.losses.policy_gradient import normalize
from rljax.losses.policy_gradient import policy_gradient_loss
from rljax.losses.policy_gradient import value_loss
from rljax.losses.returns import gae_advantages
from rljax.losses.returns import lambda_returns
from rljax.losses.returns import n_step_returns
from rljax.losses.value_learning import ddpg_actor_loss
from rljax.losses.value_learning import ddpg_critic_td
from rljax.losses.value_learning import double_q_learning_td
from rljax.losses.value_learning import huber_loss
from rljax.losses.value_learning import l2_loss
from rljax.losses.value_learning import q_learning_td
from rljax.losses.value_learning import weighted_td_loss

__all__ = [
    "ddpg_actor_loss",
    "ddpg_critic_td",
    "double_q_learning_td",
    "entropy_loss",
    "gae_advantages",
    "huber_loss",
    "l2_loss",
    "lambda_returns",
    "masked_mean",
    "n_step_returns",
    "normalize",
    "policy_gradient_loss",
    "q_learning_td",
    "value_loss",
    "weighted_td_loss",
]

# PPO and PQN building blocks.
from rljax.losses.ppo import approx_kl  # noqa: E402
from rljax.losses.ppo import clip_fraction  # noqa: E402
from rljax.losses.ppo import clipped_surrogate_loss  # noqa: E402
from rljax.losses.ppo import clipped_value_loss  # noqa: E402
from rljax.losses.q_lambda import q_lambda_returns  # noqa: E402

__all__ += [
    "approx_kl",
    "clip_fraction",
    "clipped_surrogate_loss",
    "clipped_value_loss",
    "q_lambda_returns",
]

# TD3 / SAC and C51 (categorical) targets and losses.
from rljax.losses.continuous import clipped_double_q_target  # noqa: E402
from rljax.losses.continuous import delayed_update  # noqa: E402
from rljax.losses.continuous import sac_actor_loss  # noqa: E402
from rljax.losses.continuous import sac_critic_target  # noqa: E402
from rljax.losses.continuous import smoothed_target_action  # noqa: E402
from rljax.losses.continuous import temperature_loss  # noqa: E402
from rljax.losses.distributional import categorical_double_q_target  # noqa: E402
from rljax.losses.distributional import categorical_projection  # noqa: E402
from rljax.losses.distributional import categorical_q_values  # noqa: E402
from rljax.losses.distributional import categorical_td_loss  # noqa: E402

__all__ += [
    "categorical_double_q_target",
    "categorical_projection",
    "categorical_q_values",
    "categorical_td_loss",
    "clipped_double_q_target",
    "delayed_update",
    "sac_actor_loss",
    "sac_critic_target",
    "smoothed_target_action",
    "temperature_loss",
]
