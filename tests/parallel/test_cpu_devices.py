"""Members split over host CPU devices, one per core (the run setting ``cpu_devices``):
rljax asks JAX for the devices itself before its backends start, a many-member preset
picks the split, and the members compute what they compute on one device."""

import subprocess
import sys
import textwrap
import warnings

import pytest

from rljax import cpu_threads
from rljax.run.config import override
from rljax.run.presets import ONE_THREAD_MEMBERS, from_preset, get_preset

SCRIPT = textwrap.dedent("""
    import dataclasses, os, sys
    assert "device_count" not in os.environ.get("XLA_FLAGS", "")
    import numpy as np
    from rljax.run.presets import from_preset
    from rljax.run.driver import train_run

    run = from_preset("gymnax-cartpole-ppo", num_seeds=4, cpu_devices=2, total_steps=1024,
                      logdir=sys.argv[1], tensorboard=False, num_envs=8, rollout_len=8)
    run = dataclasses.replace(run, chunk_steps=512)
    two = train_run(run, progress=False)  # asks JAX for the 2 CPU devices itself
    import jax
    assert len(jax.devices("cpu")) == 2, jax.devices()
    leaf = jax.tree.leaves(two.state.agent)[0]
    assert leaf.shape[0] == 4 and len(leaf.sharding.device_set) == 2, leaf.sharding
    one = train_run(dataclasses.replace(run, cpu_devices=1), progress=False)
    assert len(jax.tree.leaves(one.state.agent)[0].sharding.device_set) == 1
    # (equal to float rounding over the first 16 updates; later they part ways, as runs
    # on other CPUs do)
    for a, b in zip(jax.tree.leaves(two.state.agent), jax.tree.leaves(one.state.agent),
                    strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(two.state.env.stats.episodes),
                                  np.asarray(one.state.env.stats.episodes))
    more = train_run(dataclasses.replace(run, total_steps=1536), progress=False,
                     resume=two.run_dir)  # a resume keeps the split
    assert more.summary["resumed_from_step"] == 1024 and more.summary["env_steps"] == 1536
    assert len(jax.tree.leaves(more.state.agent)[0].sharding.device_set) == 2
    print("ok")
""")

# The command line asks for the devices before it reads the run's settings.
CLI = textwrap.dedent("""
    import sys
    from rljax.run import cli
    assert cli.main(["train", "gymnax-cartpole-ppo", "--seeds", "4", "--cpu-devices", "2",
                     "--total-steps", "512", "--logdir", sys.argv[1], "--no-tensorboard",
                     "--quiet"]) == 0
    import jax
    assert len(jax.devices("cpu")) == 2, jax.devices()
    print("ok")
""")


@pytest.mark.slow
@pytest.mark.parametrize("script", [SCRIPT, CLI], ids=["api", "cli"])
def test_members_over_two_cpu_devices_match_one_device_and_resume(tmp_path, script):
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]


# A run saved over 2 devices, read back in a process with one: its checksums follow the
# saved layout, and a flipped byte is still refused.
LOAD = textwrap.dedent("""
    import glob, os, shutil, sys
    import jax, rljax
    from rljax.run import checkpoint, cli
    assert len(jax.devices("cpu")) == 1, jax.devices()
    (run_dir,) = [os.path.dirname(p) for p in glob.glob(sys.argv[1] + "/*/config.json")]
    run = rljax.load(run_dir)
    leaf = jax.tree.leaves(run.state.agent)[0]
    assert leaf.shape[0] == 4 and len(leaf.sharding.device_set) == 1
    checkpoint.verify(run_dir, 512)
    assert cli.main(["eval", run_dir, "--episodes", "1"]) == 0
    bad = sys.argv[1] + "/bad"
    shutil.copytree(run_dir, bad)
    data = max(glob.glob(bad + "/checkpoint/512/state/**/d/*", recursive=True),
               key=lambda f: len(open(f, "rb").read()))
    raw = bytearray(open(data, "rb").read())
    raw[len(raw) // 2] ^= 1
    open(data, "wb").write(bytes(raw))
    try:
        rljax.load(bad)
    except ValueError as e:
        assert "do not match the checksums" in str(e), e
    else:
        raise AssertionError("a flipped byte was loaded")
    print("ok")
""")


@pytest.mark.slow
def test_a_run_split_over_two_cpu_devices_loads_and_evaluates_on_one(tmp_path):
    for script in (CLI, LOAD):
        proc = subprocess.run([sys.executable, "-c", script, str(tmp_path)],
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]


# A run resumed over another number of devices: one device, then two, then one again.
# The replay's arrays are sized so that both layouts give as many checksums (pieces of
# 20,000 bytes: 32,000 bytes on one device are 2, and so are two 16,000-byte shards).
RESPLIT = textwrap.dedent("""
    import dataclasses, sys
    import jax, rljax
    from rljax.run import checkpoint_store, checksums
    from rljax.run.driver import train_run
    from rljax.run.presets import from_preset

    rljax.set_cpu_devices(2)
    checksums.CHUNK_BYTES = checkpoint_store.CHUNK_BYTES = 20_000
    run = from_preset("cartpole-dqn", num_seeds=2, cpu_devices=2, total_steps=2_000,
                      buffer_size=1_000, logdir=sys.argv[1], tensorboard=False)
    run = dataclasses.replace(run, chunk_steps=1_000, cpu_devices=1)
    first = train_run(run, progress=False)
    obs = [x for x in jax.tree.leaves(first.state.memory) if x.nbytes == 32_000]
    assert obs and len(obs[0].sharding.device_set) == 1, obs
    assert len(jax.devices("cpu")) == 2, jax.devices()
    done = first.summary["env_steps"]
    for devices in (2, 1):
        more = train_run(dataclasses.replace(run, total_steps=done + 1_000,
                                             cpu_devices=devices),
                         progress=False, resume=first.run_dir)
        assert more.summary["resumed_from_step"] == done, (done, more.summary)
        done = more.summary["env_steps"]
        leaf = jax.tree.leaves(more.state.agent)[0]
        assert len(leaf.sharding.device_set) == devices, leaf.sharding
    print("ok")
""")


@pytest.mark.slow
def test_a_run_resumes_over_another_number_of_cpu_devices(tmp_path):
    proc = subprocess.run([sys.executable, "-c", RESPLIT, str(tmp_path)], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]


@pytest.mark.parametrize("cores,changes,threads,split", [
    (2, {"num_seeds": 64}, 0, 2),
    (4, {"num_seeds": 64}, 0, 4),
    (4, {"num_seeds": 18}, 0, 3),                       # the most cores that divide 18
    (2, {"num_seeds": 17}, 0, 1),                       # a prime count stays on one device
    (2, {"num_seeds": ONE_THREAD_MEMBERS}, 1, 1),       # few members: one device, one thread
    (2, {"num_seeds": 64, "cpu_devices": 1}, 0, 1),     # given: kept
    (2, {"num_seeds": 64, "cpu_threads": 1}, 1, 2),
    (1, {"num_seeds": 64}, 0, 1),
])
def test_a_many_member_preset_splits_its_members_over_the_cores(monkeypatch, cores, changes,
                                                                threads, split):
    monkeypatch.setattr(cpu_threads, "available_cpus", lambda: cores)
    run = from_preset("gymnax-cartpole-ppo", **changes)
    assert (run.cpu_threads, run.cpu_devices) == (threads, split)


@pytest.mark.parametrize("name,cores,changes,split", [
    ("reacher-td3", 2, {"num_seeds": 8}, 2),
    ("reacher-td3", 2, {"num_seeds": 2}, 2),
    ("reacher-td3", 2, {"num_seeds": 3}, 1),            # an odd count stays on one device
    ("reacher-td3", 2, {}, 1),                          # one seed: nothing to split
    ("reacher-td3", 4, {"num_seeds": 8}, 4),
    ("reacher-td3", 2, {"num_seeds": 8, "cpu_devices": 1}, 1),    # given: kept
    ("reacher-td3", 2, {"num_seeds": 8, "devices": 2}, 1),        # devices given: not both
    ("reacher-sac", 2, {"num_seeds": 4}, 2),
    ("reacher-ddpg", 2, {"seed": 3, "sweep": "gamma=0.98,0.99"}, 2),
    ("halfcheetah-td3", 2, {"num_seeds": 8}, 1),        # not measured: one device
])
def test_presets_that_split_members_do_so_from_two(monkeypatch, name, cores, changes, split):
    """The off-policy Reacher presets split several members over the cores (1.2-2.1x on 2
    cores, docs/scaling.md); the cores' count and what is given decide how."""
    monkeypatch.setattr(cpu_threads, "available_cpus", lambda: cores)
    assert get_preset(name).split_members == (name != "halfcheetah-td3")
    assert from_preset(name, **changes).cpu_devices == split


def test_cpu_devices_that_cannot_split_the_members_are_refused():
    base = from_preset("gymnax-cartpole-ppo")
    with pytest.raises(ValueError, match="3 members \\(seeds x sweep values\\) cannot be split "
                                         "evenly over cpu_devices=2 host CPU devices; use a "
                                         "multiple of 2, or cpu_devices=1"):
        override(base, num_seeds="3", cpu_devices="2")
    with pytest.raises(ValueError, match="cpu_devices=2 and devices=2 both split the members "
                                         "over devices; give one of them"):
        override(base, num_seeds="4", cpu_devices="2", devices="2")


def test_cpu_devices_asked_for_after_jax_started_warn_and_change_nothing():
    import jax

    jax.devices()  # the backends run (with one CPU device in this process)
    have = len(jax.devices("cpu"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cpu_threads.set_cpu_devices(have) is True
        assert cpu_threads.set_cpu_devices(have + 1) is False
    assert [str(w.message) for w in caught] == [
        f"cpu_devices={have + 1} not applied: JAX's CPU backend already runs with {have} "
        f"device(s), made once per process when it starts, so the members stay on one "
        f"device; ask before the process's first JAX computation "
        f"(rljax.set_cpu_devices({have + 1}), or rljax train)"]
