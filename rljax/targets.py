"""Target-network updates over whole pytrees (params, and batch statistics if any).

``soft_update`` is DDPG's Polyak averaging (Lillicrap et al. 2016); ``periodic_update``
is DQN's hard copy every ``period`` updates (Mnih et al. 2015). Same results as
``optax.incremental_update`` / ``optax.periodic_update``, with argument checks and the
target's dtypes kept.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rljax.types import ArrayLike


def _concrete(value: Any) -> np.ndarray | None:
    try:
        return np.asarray(value)
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
        return None


def _check_structure(target: Any, online: Any) -> None:
    target_def, online_def = jax.tree.structure(target), jax.tree.structure(online)
    if target_def != online_def:
        raise ValueError(f"target and online must have the same tree structure, got "
                         f"{target_def} and {online_def}")


def soft_update(target: Any, online: Any, tau: ArrayLike) -> Any:
    """Polyak averaging: ``target <- (1 - tau) * target + tau * online``, leafwise.

    Args:
        target: target-network pytree (floating-point leaves).
        online: online-network pytree of the same structure and shapes.
        tau: step size in [0, 1] (DDPG: 0.001); ``tau = 1`` copies ``online`` exactly,
            ``tau = 0`` keeps ``target``.

    Returns:
        The new target pytree, each leaf in the target's dtype.
    """
    array = _concrete(tau)
    if array is not None and (array.ndim != 0 or array.dtype == bool or not np.issubdtype(
            array.dtype, np.number) or not 0.0 <= float(array) <= 1.0):
        raise ValueError(f"tau must be a number in [0, 1], got {tau!r}")
    _check_structure(target, online)

    def mix(t: Any, o: Any) -> Any:
        t, o = jnp.asarray(t), jnp.asarray(o)
        return ((1.0 - tau) * t + tau * o).astype(t.dtype)

    return jax.tree.map(mix, target, online)


def periodic_update(target: Any, online: Any, step: ArrayLike, period: int) -> Any:
    """Hard update: ``online`` when ``step % period == 0``, else ``target``.

    Call it with the number of updates done so far (after incrementing it), so that the
    copy happens every ``period`` updates.

    Args:
        target: target-network pytree.
        online: online-network pytree of the same structure.
        step: update count, int (may be traced).
        period: copy period in updates, a positive Python int (Mnih et al. 2015: 10,000).

    Returns:
        The new target pytree.
    """
    if isinstance(period, bool) or not isinstance(period, int | np.integer) or period <= 0:
        raise ValueError(f"period must be a positive integer, got {period!r}")
    _check_structure(target, online)
    copy = jnp.asarray(step) % period == 0
    # A select, not a cond: the copy is cheap next to an update.
    return jax.tree.map(lambda t, o: jnp.where(copy, o, t).astype(jnp.asarray(t).dtype),
                        target, online)
