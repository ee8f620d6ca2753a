"""envpool imported with only the families a run needs, and whole when anything else is
asked of it (in fresh processes: the import is once per process)."""

import subprocess
import sys

import pytest

pytest.importorskip("envpool")


def _python(code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_a_cartpole_pool_leaves_the_heavy_families_out_and_envpool_whole_after():
    out = _python(
        "import sys\n"
        "from rljax.envs import pool\n"
        "env = pool.make('CartPole-v1', 2, 0)\n"
        "print('matplotlib' in sys.modules, 'envpool.jumanji' in sys.modules)\n"
        "import envpool\n"
        "ids = envpool.list_all_envs()\n"
        "print(envpool.__version__ is not None, 'Jumanji/Snake-v1' in ids,\n"
        "      'envpool.jumanji' in sys.modules, 'CartPole-v1' in ids)\n"
        "print(type(envpool.make('CartPole-v1', env_type='gymnasium', num_envs=1)).__name__)\n")
    light, whole, made = out.strip().splitlines()
    assert light == "False False", out
    assert whole == "True True True True", out
    assert "CartPole" in made, out


def test_an_id_outside_the_light_families_and_an_unknown_one():
    out = _python(
        "from rljax.envs import envpool_import, spec\n"
        "spec.check_task_id('Jumanji/Snake-v1')\n"
        "print(envpool_import.registry('Jumanji/Snake-v1').make_spec('Jumanji/Snake-v1')"
        ".config.num_envs)\n"
        "try:\n"
        "    spec.check_task_id('CartPole-v7')\n"
        "except ValueError as e:\n"
        "    print(e)\n")
    num_envs, refusal = out.strip().splitlines()
    assert int(num_envs) >= 1
    assert "unknown task id 'CartPole-v7'" in refusal and "CartPole-v1" in refusal, out
