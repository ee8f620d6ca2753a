"""Noisy linear layer with factorized Gaussian noise (Fortunato et al. 2018,
"Noisy Networks for Exploration").

``y = x (mu_w + sigma_w * eps_w) + mu_b + sigma_b * eps_b`` with the factorized noise
``eps_w = f(eps_in) f(eps_out)^T`` (an outer product, ``[fan_in, fan_out]``),
``eps_b = f(eps_out)`` and ``f(e) = sign(e) sqrt(|e|)``.

Where the noise comes from, in order of precedence:

1. ``deterministic=True`` (attribute or call argument): no noise, ``y = x mu_w + mu_b``.
2. A variable collection ``"noise"`` holding this layer's ``eps_in [..., fan_in]`` and
   ``eps_out [..., fan_out]`` (before ``f``): ``module.apply({"params": p, "noise": eps},
   x)``. Lets the caller drive the noise, e.g. with an Ornstein-Uhlenbeck process; build
   the tree with :func:`noise_like`. Leading dims broadcast against ``x``'s, so each
   row of a batch may carry its own noise.
3. The rng stream ``"noise"``: ``module.apply(variables, x, rngs={"noise": key})`` draws
   ``eps_in, eps_out ~ N(0, 1)``, one draw shared by the whole batch.

Without any of them the layer raises, rather than silently drop the exploration.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from rljax.types import Array, PRNGKey

NOISE = "noise"  # name of both the rng stream and the variable collection


def scale_noise(eps: Array) -> Array:
    """``f(e) = sign(e) sqrt(|e|)``, the factorized-noise transform of Fortunato et al."""
    return jnp.sign(eps) * jnp.sqrt(jnp.abs(eps))


def _uniform_fan_in(key: PRNGKey, shape: tuple[int, ...], dtype: Any, fan_in: int) -> Array:
    bound = 1.0 / jnp.sqrt(fan_in)
    return jax.random.uniform(key, shape, dtype, -bound, bound)


class NoisyDense(nn.Module):
    """Linear layer ``[..., fan_in] -> [..., features]`` with factorized Gaussian noise.

    Parameters: ``kernel_mu``, ``kernel_sigma`` ``[fan_in, features]``, ``bias_mu``,
    ``bias_sigma`` ``[features]``. Means start at ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``,
    standard deviations at ``sigma0 / sqrt(fan_in)`` (the paper's factorized init).

    Attributes:
        features: output size.
        sigma0: initial noise scale (0.5 in the paper).
        use_bias: add a (noisy) bias.
        deterministic: True uses the means only; the call argument, when given,
            overrides it.
        param_dtype: dtype of the parameters.
    """

    features: int
    sigma0: float = 0.5
    use_bias: bool = True
    deterministic: bool = False
    param_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: Array, deterministic: bool | None = None) -> Array:
        """Applies the layer.

        Args:
            x: inputs ``[..., fan_in]``.
            deterministic: True: no noise (evaluation). Overrides the attribute.

        Returns:
            Outputs ``[..., features]``.
        """
        if not isinstance(self.features, int) or self.features <= 0:
            raise ValueError(f"features must be a positive integer, got {self.features!r}")
        if not self.sigma0 >= 0.0:
            raise ValueError(f"sigma0 must be >= 0, got {self.sigma0!r}")
        if deterministic is None:
            deterministic = self.deterministic
        fan_in = x.shape[-1]
        x = x.astype(self.param_dtype)
        mu_init = lambda key, shape, dtype: _uniform_fan_in(key, shape, dtype, fan_in)
        sigma_init = nn.initializers.constant(self.sigma0 / fan_in**0.5)
        shape = (fan_in, self.features)
        kernel_mu = self.param("kernel_mu", mu_init, shape, self.param_dtype)
        kernel_sigma = self.param("kernel_sigma", sigma_init, shape, self.param_dtype)
        if self.use_bias:
            bias_mu = self.param("bias_mu", mu_init, (self.features,), self.param_dtype)
            bias_sigma = self.param("bias_sigma", sigma_init, (self.features,),
                                    self.param_dtype)

        y = x @ kernel_mu
        if self.use_bias:
            y = y + bias_mu
        eps = None if deterministic else self._noise(fan_in)
        if eps is None:
            return y
        f_in, f_out = scale_noise(eps[0]), scale_noise(eps[1])
        # x (sigma_w * f_in f_out^T) = ((x * f_in) sigma_w) * f_out: never forms the
        # [fan_in, features] noise matrix, and lets per-row noise broadcast.
        y = y + ((x * f_in) @ kernel_sigma) * f_out
        if self.use_bias:
            y = y + bias_sigma * f_out
        return y

    @property
    def _label(self) -> str:
        return f"NoisyDense {self.name!r}" if self.name else "NoisyDense"

    def _noise(self, fan_in: int) -> tuple[Array, Array] | None:
        if self.has_variable(NOISE, "eps_in") or self.has_variable(NOISE, "eps_out"):
            eps_in = self.get_variable(NOISE, "eps_in")
            eps_out = self.get_variable(NOISE, "eps_out")
            if eps_in is None or eps_out is None:
                raise ValueError(f"{self._label}: the 'noise' collection needs both eps_in and "
                                 f"eps_out, got {'eps_in' if eps_out is None else 'eps_out'} "
                                 "only")
            if eps_in.shape[-1:] != (fan_in,) or eps_out.shape[-1:] != (self.features,):
                raise ValueError(
                    f"{self._label}: noise must be eps_in [..., {fan_in}] and eps_out "
                    f"[..., {self.features}], got {eps_in.shape} and {eps_out.shape}")
            return eps_in.astype(self.param_dtype), eps_out.astype(self.param_dtype)
        if self.has_rng(NOISE):
            # One draw for both vectors: a third of the random-number kernels.
            eps = jax.random.normal(self.make_rng(NOISE), (fan_in + self.features,),
                                    self.param_dtype)
            return eps[:fan_in], eps[fan_in:]
        if self.is_initializing():
            return None  # shapes only; the means are enough
        raise ValueError(
            f"{self._label}: noisy layer called with deterministic=False but without noise: "
            "pass rngs={'noise': key}, a 'noise' variable collection, or deterministic=True")


def _is_noisy_layer(tree: Any) -> bool:
    return isinstance(tree, Mapping) and "kernel_sigma" in tree and "kernel_mu" in tree


def noise_like(variables: Mapping[str, Any], batch_shape: tuple[int, ...] = (),
               dtype: Any = jnp.float32) -> dict[str, Any]:
    """Zero noise with the structure of the ``"noise"`` collection of a network.

    Args:
        variables: the network's variables (``{"params": ...}``, as ``init`` returns).
        batch_shape: leading dims, e.g. ``(num_envs,)`` for one noise process per env.
        dtype: dtype of the noise.

    Returns:
        A nested dict mirroring the module tree, with ``{"eps_in": [*batch_shape, fan_in],
        "eps_out": [*batch_shape, fan_out]}`` zeros for every :class:`NoisyDense`; pass
        it (after filling it, e.g. with :func:`rljax.exploration.ou_step`) as
        ``apply(..., noise=tree)`` or as the ``"noise"`` collection. Empty when the
        network has no noisy layer.
    """
    if "params" not in variables:
        raise ValueError(f"variables must contain 'params', got keys {sorted(variables)}")
    batch_shape = tuple(batch_shape)

    def build(tree: Any) -> dict[str, Any] | None:
        if _is_noisy_layer(tree):
            fan_in, fan_out = tree["kernel_mu"].shape
            return {"eps_in": jnp.zeros(batch_shape + (fan_in,), dtype),
                    "eps_out": jnp.zeros(batch_shape + (fan_out,), dtype)}
        if not isinstance(tree, Mapping):
            return None
        children = {k: build(v) for k, v in tree.items()}
        return {k: v for k, v in children.items() if v}

    return build(variables["params"]) or {}


def gaussian_noise_like(variables: Mapping[str, Any], key: PRNGKey,
                        batch_shape: tuple[int, ...] = (), dtype: Any = jnp.float32
                        ) -> dict[str, Any]:
    """Fresh ``N(0, 1)`` noise inputs with the structure of :func:`noise_like`.

    Unlike the ``"noise"`` rng stream (one draw for a whole batch), ``batch_shape`` gives
    each row its own draw, e.g. ``(num_envs,)`` for independent exploration per env.
    """
    leaves, treedef = jax.tree.flatten(noise_like(variables, batch_shape, dtype))
    keys = jax.random.split(key, max(len(leaves), 1))
    return jax.tree.unflatten(treedef, [jax.random.normal(k, x.shape, x.dtype)
                                        for k, x in zip(keys, leaves, strict=False)])
