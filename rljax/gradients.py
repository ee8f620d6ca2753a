"""One gradient step, the same in every agent: ``value_and_grad`` of a loss, the
optimizer's update, ``optax.apply_updates``.

The optimizer is built once, by the agent's ``make_<algo>``, with the parallel layer's
gradient transformation (if any) chained in front of it (:func:`with_grad_transform`), so
the step itself knows nothing of devices.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import optax
from jax.flatten_util import ravel_pytree

from rljax.types import Array


class Flattened(optax.GradientTransformation):
    """``optax.flatten(transform)`` (one flat vector instead of one array per parameter),
    marked so that :func:`gradient_step` measures the gradient norm over the same vector:
    XLA then computes it once, with the global-norm clip inside (as two norms, one over the
    tree and one over the vector, it cost PPO on gymnax CartPole 2-3% of its steps)."""


def flattened(transform: optax.GradientTransformation) -> Flattened:
    """``transform`` applied to the parameters as one flat vector (``optax.flatten``)."""
    return Flattened(*optax.flatten(transform))


class Step(NamedTuple):
    """What :func:`gradient_step` returns.

    Attributes:
        params: the parameters after the step.
        opt_state: the optimizer's state after the step.
        loss: the loss before the step.
        aux: the loss function's auxiliary output (None without ``has_aux``).
        grads: the gradients (before the optimizer's transformations).
        flat: whether the optimizer works on one flat vector (:class:`Flattened`).
    """

    params: Any
    opt_state: optax.OptState
    loss: Array
    aux: Any
    grads: Any
    flat: bool = False

    @property
    def grad_norm(self) -> Array:
        """Global norm of the gradients (over the flat vector for a :class:`Flattened`
        optimizer, so that it is the norm the optimizer computes)."""
        return optax.tree.norm(ravel_pytree(self.grads)[0] if self.flat else self.grads)


def gradient_step(loss_fn: Callable[..., Any], optimizer: optax.GradientTransformation,
                  params: Any, opt_state: optax.OptState, *args: Any,
                  has_aux: bool = True) -> Step:
    """One optimizer step on ``loss_fn(params, *args)``.

    Args:
        loss_fn: ``loss_fn(params, *args) -> loss`` or, with ``has_aux``, ``(loss, aux)``.
        optimizer: the optax transformation (built once, outside the step).
        params: the parameters differentiated.
        opt_state: ``optimizer``'s state for ``params``.
        *args: the loss function's other arguments (not differentiated).
        has_aux: whether ``loss_fn`` returns ``(loss, aux)``.

    Returns:
        :class:`Step`.
    """
    out, grads = jax.value_and_grad(loss_fn, has_aux=has_aux)(params, *args)
    loss, aux = out if has_aux else (out, None)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return Step(optax.apply_updates(params, updates), opt_state, loss, aux, grads,
                isinstance(optimizer, Flattened))


def with_grad_transform(optimizer: optax.GradientTransformation,
                        grad_transform: optax.GradientTransformation | None
                        ) -> optax.GradientTransformation:
    """``optimizer`` with ``grad_transform`` applied to the gradients first (None: the
    optimizer itself, so single-device states keep their structure)."""
    if grad_transform is None:
        return optimizer
    return optax.chain(grad_transform, optimizer)
