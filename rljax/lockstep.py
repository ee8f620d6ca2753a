"""A ``lax.cond`` that stays a branch when members vmapped together agree.

Under ``jax.vmap`` a ``lax.cond`` whose predicate is batched becomes a ``select``: every
member computes both branches and keeps one. rljax vmaps whole training loops over
members (seeds, sweep values; :mod:`rljax.parallel.members`), and the predicates of its
conds there are batched but, for seeds, always equal: "has the replay reached
``learning_starts``" and "is this update a delayed actor update" depend on step counters
that all members advance in lockstep. As a select, a multi-seed run computes a gradient
step during every random-phase update and TD3's actor update at every critic update.

:func:`cond` is ``lax.cond`` for a single run. Under vmap it branches on the members'
predicates at run time: all true runs the vmapped true branch, all false the vmapped
false branch, and only when members disagree (e.g. a sweep over ``learning_starts``)
does it fall back to ``lax.cond``'s select. The results are those of ``lax.cond`` in
every case.

Not differentiable (``custom_vmap`` defines no derivative); rljax uses it around whole
update steps, never inside a loss.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.extend.core as jax_core
import jax.numpy as jnp
from jax.custom_batching import custom_vmap


def cond(pred: Any, true_fun: Callable, false_fun: Callable, *operands: Any) -> Any:
    """``lax.cond(pred, true_fun, false_fun, *operands)``, branching under vmap too.

    Args:
        pred: scalar boolean (may be traced, and batched under vmap).
        true_fun, false_fun: functions of ``*operands`` with outputs of one structure,
            shapes and dtypes; they may close over traced values.
        operands: pytrees of arrays.

    Returns:
        ``true_fun(*operands)`` where ``pred`` holds, else ``false_fun(*operands)``.
    """
    # custom_vmap refuses batched values a function closes over, so the branches take
    # them (members' observations, counters, ...) as explicit operands
    # (jax.closure_convert would hoist only the floating-point ones).
    t_fun, t_consts = _explicit(true_fun, operands)
    f_fun, f_consts = _explicit(false_fun, operands)
    return _cond(pred, lambda tc, fc, *ops: t_fun(tc, *ops),
                 lambda tc, fc, *ops: f_fun(fc, *ops), t_consts, f_consts, *operands)


def _explicit(fun: Callable, operands: tuple) -> tuple[Callable, list]:
    """``fun`` as ``converted(consts, *operands)``, where ``consts`` are all the arrays
    (traced or not) that ``fun`` reads from its closure."""
    closed, out_shape = jax.make_jaxpr(fun, return_shape=True)(*operands)
    out_tree = jax.tree.structure(out_shape)

    def converted(consts, *ops):
        flat = jax_core.jaxpr_as_fun(jax_core.ClosedJaxpr(closed.jaxpr, consts))(
            *jax.tree.leaves(ops))
        return jax.tree.unflatten(out_tree, flat)

    return converted, list(closed.consts)


def _cond(pred: Any, true_fun: Callable, false_fun: Callable, *operands: Any) -> Any:
    """:func:`cond` for branches that close over no traced values."""
    @custom_vmap
    def branch(pred, *operands):
        return jax.lax.cond(pred, true_fun, false_fun, *operands)

    @branch.def_vmap
    def vmap_rule(axis_size, in_batched, pred, *operands):
        pred_batched, *operands_batched = in_batched
        axes = tuple(jax.tree.map(lambda b: 0 if b else None, b) for b in operands_batched)

        def vmapped(fun):
            return lambda *ops: jax.vmap(fun, in_axes=axes, axis_size=axis_size)(*ops)

        if not pred_batched:
            out = jax.lax.cond(pred, vmapped(true_fun), vmapped(false_fun), *operands)
        else:
            def each(*ops):  # members disagree: each keeps its own branch's result
                return jax.vmap(lambda p, *o: jax.lax.cond(p, true_fun, false_fun, *o),
                                in_axes=(0, *axes), axis_size=axis_size)(pred, *ops)

            index = jnp.where(jnp.all(pred), 0, jnp.where(jnp.any(pred), 2, 1))
            out = jax.lax.switch(index, (vmapped(true_fun), vmapped(false_fun), each),
                                 *operands)
        return out, jax.tree.map(lambda _: True, out)

    return branch(pred, *operands)
