"""What every agent shares: one factory signature with the Parallel record, one
action-space check and its wording, one gradient step."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rljax.agents import base
from rljax.envs.spec import EnvSpec
from rljax.gradients import gradient_step
from rljax.run.registry import ALGORITHMS

CONTINUOUS = EnvSpec(task_id="Reacher-v5", num_envs=2, obs_shape=(5,), obs_dtype=np.float32,
                     num_actions=None, action_shape=(2,), action_low=(-1.0, -1.0),
                     action_high=(1.0, 1.0), max_episode_steps=50, reward_threshold=None,
                     is_atari=False)
DISCRETE = dataclasses.replace(CONTINUOUS, task_id="CartPole-v1", num_actions=2,
                               action_shape=(), action_low=None, action_high=None)


def _factory(name):
    algo = ALGORITHMS[name]
    return getattr(importlib.import_module(algo.module), algo.factory_name), algo


def test_every_factory_has_one_signature():
    for name in ALGORITHMS:
        make, _ = _factory(name)
        params = inspect.signature(make).parameters
        assert list(params) == ["config", "spec", "parallel", "run"], name
        assert params["parallel"].kind is inspect.Parameter.KEYWORD_ONLY, name
        assert params["parallel"].default is base.ONE_DEVICE, name
        assert params["run"].kind is inspect.Parameter.KEYWORD_ONLY, name


def test_agent_lists_name_every_registered_agent():
    assert set(base.DISCRETE_AGENTS) | set(base.CONTINUOUS_AGENTS) == set(ALGORITHMS)
    assert set(base.FLAT_OBS_AGENTS) <= set(base.CONTINUOUS_AGENTS)


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_wrong_action_space_is_refused_in_one_wording(name):
    make, algo = _factory(name)
    config = getattr(importlib.import_module(algo.module), algo.config_name)()
    if name in base.DISCRETE_AGENTS and name in base.CONTINUOUS_AGENTS:
        spec, kind = dataclasses.replace(CONTINUOUS, action_shape=(2, 3)), "continuous"
    elif name in base.DISCRETE_AGENTS:
        spec, kind = CONTINUOUS, "continuous"
    else:
        spec, kind = DISCRETE, "discrete"
    with pytest.raises(ValueError) as e:
        make(config, spec)
    message = str(e.value)
    assert re.match(rf"{name.upper()} needs an? (discrete|continuous \(bounded, \[A\]-shaped\)) "
                    rf"action space, but {spec.task_id} has a {kind} one \(", message), message
    fits = base.DISCRETE_AGENTS if kind == "discrete" else base.CONTINUOUS_AGENTS
    assert message.endswith(f"rljax agents for a {kind} action space: {', '.join(fits)}")


def test_continuous_only_agents_refuse_frames():
    frames = dataclasses.replace(CONTINUOUS, obs_shape=(84, 84, 4))
    with pytest.raises(ValueError, match=r"TD3 needs flat observations, but Reacher-v5 has "
                                         r"observations of shape \(84, 84, 4\); .*: ppo$"):
        base.check_action_space("TD3", frames, discrete=False, flat_obs=True)


def test_gradient_step_is_value_and_grad_then_the_optimizer():
    params = {"w": jnp.asarray([1.0, -2.0]), "b": jnp.asarray(0.5)}
    x = jnp.asarray([[1.0, 2.0], [3.0, -1.0]])

    def loss(p, x):
        out = x @ p["w"] + p["b"]
        return jnp.mean(out ** 2), {"out": out}

    optimizer = optax.adam(0.1)
    state = optimizer.init(params)
    step = gradient_step(loss, optimizer, params, state, x)
    grads = jax.grad(lambda p: loss(p, x)[0])(params)
    updates, want_state = optimizer.update(grads, state, params)
    jax.tree.map(np.testing.assert_array_equal, step.params,
                 optax.apply_updates(params, updates))
    jax.tree.map(np.testing.assert_array_equal, step.opt_state, want_state)
    np.testing.assert_array_equal(step.loss, loss(params, x)[0])
    np.testing.assert_array_equal(step.aux["out"], loss(params, x)[1]["out"])
    np.testing.assert_allclose(step.grad_norm, optax.tree.norm(grads))
    plain = gradient_step(lambda p, x: loss(p, x)[0], optimizer, params, state, x,
                          has_aux=False)
    assert plain.aux is None
    np.testing.assert_array_equal(plain.loss, step.loss)


def test_a_flattened_optimizer_steps_as_optax_flatten_and_measures_its_vector():
    """``flattened`` is ``optax.flatten``; the step's gradient norm is taken over the same
    flat vector (one norm for XLA to compute with the clip) and equals the tree's."""
    from rljax.gradients import Flattened, flattened

    params = {"w": jnp.asarray([[1.0, -2.0], [0.5, 3.0]]), "b": jnp.asarray([0.5, -1.0])}
    x = jnp.asarray([[1.0, 2.0], [3.0, -1.0], [0.0, 1.0]])
    loss = lambda p, x: jnp.mean((x @ p["w"] + p["b"]) ** 2)
    inner = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(0.1))
    flat, reference = flattened(inner), optax.flatten(inner)
    assert isinstance(flat, Flattened)
    step = gradient_step(loss, flat, params, flat.init(params), x, has_aux=False)
    grads = jax.grad(loss)(params, x)
    updates, _ = reference.update(grads, reference.init(params), params)
    jax.tree.map(np.testing.assert_array_equal, step.params,
                 optax.apply_updates(params, updates))
    assert step.flat and not gradient_step(loss, inner, params, inner.init(params), x,
                                           has_aux=False).flat
    np.testing.assert_allclose(step.grad_norm, optax.tree.norm(grads), rtol=1e-6)
    hlo = jax.jit(lambda p: gradient_step(loss, flat, p, flat.init(p), x,
                                          has_aux=False).grad_norm).lower(params).as_text()
    assert "concatenate" in hlo


def test_parallel_chains_the_gradient_transformation_first():
    zero = base.Parallel(grad_transform=optax.scale(0.0))
    params = {"w": jnp.ones(3)}
    optimizer = zero.optimizer(optax.sgd(1.0))
    updates, _ = optimizer.update({"w": jnp.ones(3)}, optimizer.init(params), params)
    np.testing.assert_array_equal(updates["w"], 0.0)
    sgd = optax.sgd(1.0)
    assert base.ONE_DEVICE.optimizer(sgd) is sgd
