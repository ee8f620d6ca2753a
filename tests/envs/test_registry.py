"""Env backends as records: every dispatch on a task id is one registry lookup, and a
backend registered from outside rljax is used like the built-in ones."""

import pytest

from rljax import envs
from rljax.envs import registry


def _mirror_backend(calls):
    """A user's backend that serves gymnax's CartPole under its own prefix and names."""
    def make(name, num_envs, seed, **options):
        calls.append(name)
        return envs.make("gymnax:CartPole-v1", num_envs, seed, **options)

    def spec(name, **options):
        registry.check_name(f"mirror:{name}", name, ("Pole",))
        return envs.make("gymnax:CartPole-v1", 1, 0, **options).spec

    return envs.Backend(make=make, task_ids=lambda: ("Pole",), spec=spec, vmappable=True,
                        thresholds={"Pole": 123.0}, description="a test's own")


@pytest.fixture
def mirror():
    calls = []
    envs.register("mirror", _mirror_backend(calls))
    yield calls
    registry._BACKENDS.pop("mirror")


def test_builtin_backends_are_records_in_the_registry():
    table = envs.backends()
    assert list(table)[:3] == ["", "gymnax", "craftax"]
    assert all(isinstance(b, envs.Backend) for b in table.values())
    assert not table[""].vmappable and table["gymnax"].vmappable
    assert envs.reward_threshold("CartPole-v1") == 475.0
    assert envs.reward_threshold("gymnax:CartPole-v1") == 475.0
    assert envs.reward_threshold("gymnax:Pendulum-v1") is None
    assert envs.vmappable("gymnax:Acrobot-v1") and not envs.vmappable("Pong-v5")


def test_a_registered_backend_is_made_checked_and_listed(mirror):
    env = envs.make("mirror:Pole", 3, 0)
    assert mirror == ["Pole"] and env.spec.task_id == "mirror:Pole"
    assert env.spec.num_envs == 3 and envs.vmappable("mirror:Pole")
    assert envs.reward_threshold("mirror:Pole") == 123.0
    assert envs.task_ids()["mirror"] == ["mirror:Pole"]
    with pytest.raises(ValueError, match=r"did you mean mirror:Pole"):
        envs.check_task("mirror:Pol")


def test_bad_registrations_and_unknown_prefixes_are_refused(mirror):
    with pytest.raises(ValueError, match="without ':'"):
        envs.register("a:b", _mirror_backend([]))
    with pytest.raises(ValueError, match="takes an rljax.envs.Backend record"):
        envs.register("x", object())
    with pytest.raises(ValueError,
                       match="allowed: gymnax, craftax, object, brax, playground, mirror"):
        envs.check_task("mirrr:Pole")


def test_a_backend_without_its_package_says_how_to_install_it():
    envs.register("absent", envs.Backend(make=None, task_ids=lambda: (), spec=None,
                                         package="no_such_pkg_rljax",
                                         install="pip install 'rljax[absent]'"))
    try:
        with pytest.raises(ValueError, match=r"^absent:X needs the no_such_pkg_rljax package: "
                                             r"pip install 'rljax\[absent\]'$"):
            envs.make("absent:X", 2)
    finally:
        registry._BACKENDS.pop("absent")


@pytest.mark.slow
def test_a_backend_registered_from_a_test_module_is_listed_and_trained_on(tmp_path, capsys):
    import user_envs

    import rljax
    from rljax.envs import brax_style
    from rljax.run import cli

    def make(name, num_envs, seed, **options):
        return brax_style.make(user_envs.Reach(), num_envs, seed, task_id=f"testtoy:{name}",
                               **options)

    envs.register("testtoy", envs.Backend(
        make=make, task_ids=lambda: ("Reach",), spec=lambda name, **o: make(name, 1, 0, **o).spec,
        description="registered by a test"))
    try:
        assert cli.main(["envs"]) == 0
        assert "testtoy (registered by a test):\n  testtoy:Reach\n" in capsys.readouterr().out
        run = rljax.train("gymnax-cartpole-ppo", env="testtoy:Reach", num_envs=4,
                          total_steps=1_024, chunk_steps=512, logdir=str(tmp_path))
        assert run.summary["env_id"] == "testtoy:Reach" and len(run.metrics) == 2
        assert run.metrics[-1]["episodes"] > 0  # 10-step episodes ended
    finally:
        registry._BACKENDS.pop("testtoy")
