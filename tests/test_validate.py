"""Config value checks: what each accepts and refuses, and that messages name the field,
the value and what is allowed."""

import math
import re

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rljax import exploration, validate
from rljax.agents.a2c import A2CConfig
from rljax.agents.ddpg import DDPGConfig
from rljax.agents.dqn import DQNConfig
from rljax.records import configure

NAN, INF = float("nan"), float("inf")


def refused(fn, *args, message: str, **kwargs) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        fn(*args, **kwargs)


# --- integer --------------------------------------------------------------------------


@pytest.mark.parametrize("value", [1, 5, 10])
def test_integer_accepts_ints_in_bounds(value):
    assert validate.integer("n", value, low=1, high=10) is value


@pytest.mark.parametrize("value", [0, 11, -3, True, False, 1.0, 2.5, "3", None, NAN,
                                   np.int64(3)])
def test_integer_refuses(value):
    refused(validate.integer, "n", value, low=1, high=10,
            message=f"n must be an integer in [1, 10], got {value!r}")


def test_integer_bounds_in_the_message():
    refused(validate.integer, "k", -1, low=0, message="k must be an integer >= 0, got -1")
    refused(validate.integer, "k", 9, high=8, message="k must be an integer <= 8, got 9")
    refused(validate.integer, "k", "x", message="k must be an integer, got 'x'")
    assert validate.integer("k", -(10**30)) == -(10**30)


def test_integer_optional_and_note():
    assert validate.integer("n", None, low=1, optional=True) is None
    refused(validate.integer, "n", None, low=1, message="n must be an integer >= 1, got None")
    refused(validate.integer, "n", 0, low=1, optional=True, note="why",
            message="n must be an integer >= 1 or None (why), got 0")


def test_integer_int32_note_for_counters():
    limit = validate.INT32_LIMIT
    assert validate.integer("c", limit - 1, low=1, high=limit - 1) == limit - 1
    refused(validate.integer, "c", limit, low=1, high=limit - 1, note=validate.INT32_NOTE,
            message=f"c must be an integer in [1, 2147483647] (below 2**31: the training "
                    f"loop counts in int32), got {limit}")
    assert limit == int(np.iinfo(np.int32).max) + 1


@settings(max_examples=60, deadline=None)
@given(value=st.integers(-50, 50), low=st.integers(-20, 20), width=st.integers(0, 20))
def test_integer_matches_the_interval(value, low, width):
    high = low + width
    if low <= value <= high:
        assert validate.integer("n", value, low=low, high=high) == value
    else:
        with pytest.raises(ValueError, match="n must be an integer in"):
            validate.integer("n", value, low=low, high=high)


# --- number ---------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, 0.0, 0.5, 1, 1.0, np.float64(0.25)])
def test_number_accepts_ints_and_floats_in_bounds(value):
    assert validate.number("gamma", value, low=0.0, high=1.0) is value


@pytest.mark.parametrize("value", [NAN, INF, -INF, -0.1, 1.5, True, "0.5", None,
                                   np.float32(0.5), (0.5,)])
def test_number_in_range_refuses(value):
    refused(validate.number, "gamma", value, low=0.0, high=1.0,
            message=f"gamma must be a number in [0.0, 1.0], got {value!r}")


@pytest.mark.parametrize("value", [NAN, INF, -INF])
def test_number_refuses_nan_and_inf_with_one_bound_or_none(value):
    refused(validate.number, "lr", value, low=0.0, low_open=True,
            message=f"lr must be a finite number > 0.0, got {value!r}")
    refused(validate.number, "x", value, message=f"x must be a finite number, got {value!r}")
    refused(validate.number, "y", value, high=2.0, high_open=True,
            message=f"y must be a finite number < 2.0, got {value!r}")


def test_number_open_and_closed_bounds():
    refused(validate.number, "lr", 0.0, low=0.0, low_open=True,
            message="lr must be a finite number > 0.0, got 0.0")
    assert validate.number("lr", 1e-300, low=0.0, low_open=True) == 1e-300
    assert validate.number("eps", 0.0, low=0.0) == 0.0
    refused(validate.number, "m", 1.0, low=0.0, high=1.0, high_open=True,
            message="m must be a number in [0.0, 1.0), got 1.0")
    refused(validate.number, "m", 0.0, low=0.0, high=1.0, low_open=True,
            message="m must be a number in (0.0, 1.0], got 0.0")
    assert validate.number("big", 1e308) == 1e308


def test_number_optional_and_note():
    assert validate.number("tau", None, low=0.0, high=1.0, optional=True) is None
    refused(validate.number, "tau", NAN, low=0.0, high=1.0, optional=True, note="soft update",
            message="tau must be a number in [0.0, 1.0] or None (soft update), got nan")


@settings(max_examples=60, deadline=None)
@given(value=st.floats(allow_nan=True, allow_infinity=True))
def test_number_matches_a_plain_reference(value):
    ok = math.isfinite(value) and -1.0 < value <= 2.0
    if ok:
        assert validate.number("v", value, low=-1.0, high=2.0, low_open=True) == value
    else:
        with pytest.raises(ValueError, match=r"v must be a number in \(-1.0, 2.0\]"):
            validate.number("v", value, low=-1.0, high=2.0, low_open=True)


# --- boolean --------------------------------------------------------------------------


def test_boolean():
    assert validate.boolean("noisy", True) is True
    assert validate.boolean("noisy", False) is False
    assert validate.boolean("frame_replay", None, optional=True) is None
    for value in ("yes", "true", "no", 1, 0, None, np.bool_(True), 1.0):
        refused(validate.boolean, "noisy", value,
                message=f"noisy must be true or false, got {value!r}")
    refused(validate.boolean, "frame_replay", "on", optional=True,
            message="frame_replay must be true, false or None, got 'on'")


# --- sizes ----------------------------------------------------------------------------


def test_sizes():
    assert validate.sizes("hidden", (64, 32)) == (64, 32)
    assert validate.sizes("head", (), allow_empty=True) == ()
    for value in ((), [64], (0,), (64, -1), (True,), (1.0,), "64", None, (64, "32")):
        refused(validate.sizes, "hidden", value,
                message=f"hidden must be a non-empty tuple of positive integers, got {value!r}")
    refused(validate.sizes, "head", (3, 0), allow_empty=True,
            message="head must be a tuple of positive integers (possibly empty), got (3, 0)")


# --- choice ---------------------------------------------------------------------------


def test_choice():
    assert validate.choice("noise", "ou", ("ou", "gaussian", "none")) == "ou"
    for value in ("pink", "OU", "", None, 1, ("ou",)):
        refused(validate.choice, "noise", value, ("ou", "gaussian", "none"),
                message=f"noise must be one of ou, gaussian, none, got {value!r}")
    assert validate.choice("n", 2, [1, 2]) == 2


# --- schedule -------------------------------------------------------------------------


@pytest.mark.parametrize("value", [((0, 1.0),), ((0, 1),), ((0, 1.0), (25_000, 0.1)),
                                   ((0, 0.4), (1, 0.5), (2**31 - 1, 1.0))])
def test_schedule_accepts(value):
    assert validate.schedule("eps", value, low=0.0, high=1.0) is value


@pytest.mark.parametrize("value", [[(0, 1.0)], (), ((0, 1.0, 2.0),), ((0,),), [[0, 1.0]],
                                   ((0, 1.0), [5, 0.5]), (0, 1.0), "0:1.0", None])
def test_schedule_refuses_what_is_not_a_tuple_of_pairs(value):
    refused(validate.schedule, "eps", value,
            message=f"eps must be a schedule ((update, value), ...), a non-empty tuple of "
                    f"pairs (e.g. ((0, 1.0), (25000, 0.1)), '0:1.0,25000:0.1' on the command "
                    f"line), got {value!r}")


@pytest.mark.parametrize("value", [((1, 1.0),), ((-1, 1.0),), ((0, 1.0), (5, 0.5), (5, 0.1)),
                                   ((0, 1.0), (5, 0.5), (3, 0.1)), ((0, 1.0), (2.0, 0.5)),
                                   ((False, 1.0),), ((0, 1.0), (2**31, 0.5)),
                                   ((0, 1.0), ("5", 0.5))])
def test_schedule_refuses_bad_updates(value):
    refused(validate.schedule, "eps", value,
            message=f"eps must be a schedule whose updates are integers strictly increasing "
                    f"from 0 (below 2**31: the training loop counts in int32; e.g. ((0, 1.0), "
                    f"(25000, 0.1)), '0:1.0,25000:0.1' on the command line), got {value!r}")


@pytest.mark.parametrize("value", [((0, NAN),), ((0, 1.0), (5, INF)), ((0, -INF),),
                                   ((0, True),), ((0, "1.0"),), ((0, None),)])
def test_schedule_refuses_values_that_are_not_finite_numbers(value):
    refused(validate.schedule, "beta", value,
            message=f"beta values must be finite numbers, got {value!r}")
    refused(validate.schedule, "beta", value, low=0.0, high=1.0,
            message=f"beta values must be numbers in [0.0, 1.0], got {value!r}")


def test_schedule_value_bounds():
    refused(validate.schedule, "eps", ((0, 1.0), (10, 1.5)), low=0.0, high=1.0,
            message="eps values must be numbers in [0.0, 1.0], got ((0, 1.0), (10, 1.5))")
    refused(validate.schedule, "eps", ((0, -0.5),), low=0.0,
            message="eps values must be finite numbers >= 0.0, got ((0, -0.5),)")
    assert validate.schedule("x", ((0, -1e9), (3, 1e9))) == ((0, -1e9), (3, 1e9))


# Subnormal values are left out: XLA:CPU flushes float32 subnormals to zero inside a compiled
# program (a schedule value of 1e-45 reads back as 0.0 under jit).
_schedules = st.lists(st.tuples(st.integers(1, 10**6),
                                st.floats(0.0, 1.0, allow_subnormal=False, width=32)),
                      max_size=4).map(
    lambda rest: ((0, 0.5),) + tuple(sorted({u: (u, v) for u, v in rest}.values())))


@pytest.mark.parametrize("jit", [False, True])
@settings(max_examples=20, deadline=None)
@given(points=_schedules)
def test_accepted_schedules_run_through_piecewise_linear(jit, points):
    assert validate.schedule("s", points, low=0.0, high=1.0) is points
    fn = exploration.piecewise_linear(points)
    fn = jax.jit(fn) if jit else fn
    for update, value in points:
        assert float(fn(np.int32(update))) == np.float32(value)


# --- the configs use them -------------------------------------------------------------


@pytest.mark.parametrize("config_cls,field", [
    (A2CConfig, "actor_lr"), (A2CConfig, "critic_lr"), (DQNConfig, "lr"),
    (DQNConfig, "huber_delta"), (DQNConfig, "adam_eps"), (DDPGConfig, "actor_lr"),
    (DDPGConfig, "critic_lr"), (DDPGConfig, "huber_delta")])
@pytest.mark.parametrize("value", [NAN, INF])
def test_configs_refuse_nan_and_inf_learning_rates_and_loss_parameters(config_cls, field, value):
    refused(configure, config_cls, **{field: value},
            message=f"{field} must be a finite number > 0.0, got {value!r}")


@pytest.mark.parametrize("config_cls,field", [
    (A2CConfig, "gamma"), (A2CConfig, "entropy_coef"), (A2CConfig, "max_grad_norm"),
    (DQNConfig, "alpha"), (DQNConfig, "noisy_sigma0"), (DQNConfig, "tau"),
    (DDPGConfig, "tau"), (DDPGConfig, "target_noise"), (DDPGConfig, "negative_slope")])
def test_configs_refuse_nan_in_bounded_fields(config_cls, field):
    with pytest.raises(ValueError, match=f"^{field} must be a number in .* got nan$"):
        configure(config_cls, **{field: NAN})


@pytest.mark.parametrize("config_cls", [DQNConfig, DDPGConfig])
def test_configs_refuse_a_nan_beta_schedule_and_string_flags(config_cls):
    refused(configure, config_cls, beta=((0, NAN),),
            message="beta values must be numbers in [0.0, 1.0], got ((0, nan),)")
    refused(configure, config_cls, prioritized="yes", message="prioritized must be true or false")
    refused(configure, config_cls, buffer_size=2**31,
            message="buffer_size must be an integer in [1, 2147483647] (below 2**31")
