"""Pure loss and return functions, per transition or per sequence."""

from rljax.losses.policy_gradient import entropy_loss
from rljax.losses.policy_gradient import masked_mean
from rljax.losses.policy_gradient import normalize
from rljax.losses.policy_gradient import policy_gradient_loss
from rljax.losses.policy_gradient import value_loss
from rljax.losses.returns import gae_advantages
from rljax.losses.returns import lambda_returns
from rljax.losses.returns import n_step_returns

__all__ = [
    "entropy_loss",
    "gae_advantages",
    "lambda_returns",
    "masked_mean",
    "n_step_returns",
    "normalize",
    "policy_gradient_loss",
    "value_loss",
]
