"""Pure loss and return functions, per transition or per sequence."""

from rljax.losses.policy_gradient import entropy_loss
from rljax.losses.policy_gradient import masked_mean
from rljax.losses.policy_gradient import masked_mean_share
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
    "masked_mean_share",
    "n_step_returns",
    "normalize",
    "policy_gradient_loss",
    "q_learning_td",
    "value_loss",
    "weighted_td_loss",
]
