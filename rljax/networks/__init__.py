"""Networks as ``Network(init, apply)`` pairs; the only users of flax.linen."""

from rljax.networks.core import MLP
from rljax.networks.core import NatureCNN
from rljax.networks.core import Network
from rljax.networks.core import make_actor_critic
from rljax.networks.core import make_policy_network
from rljax.networks.core import make_value_network
from rljax.networks.ddpg import make_ddpg_actor
from rljax.networks.ddpg import make_ddpg_critic
from rljax.networks.distributions import categorical_entropy
from rljax.networks.distributions import categorical_log_prob
from rljax.networks.distributions import categorical_sample
from rljax.networks.distributions import greedy
from rljax.networks.noisy import NoisyDense
from rljax.networks.noisy import noise_like
from rljax.networks.value import make_q_network

__all__ = [
    "MLP",
    "NatureCNN",
    "Network",
    "NoisyDense",
    "categorical_entropy",
    "categorical_log_prob",
    "categorical_sample",
    "greedy",
    "make_actor_critic",
    "make_ddpg_actor",
    "make_ddpg_critic",
    "make_policy_network",
    "make_q_network",
    "make_value_network",
    "noise_like",
]
