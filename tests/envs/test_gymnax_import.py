"""gymnax imported with its plotting modules left until a renderer reads them (in a fresh
process: the import is once per process)."""

import subprocess
import sys

import pytest

pytest.importorskip("gymnax")


def test_a_gymnax_env_leaves_pyplot_and_seaborn_out_until_a_renderer_uses_them():
    code = (
        "import sys\n"
        "from rljax.envs import make\n"
        "env = make('gymnax:CartPole-v1', num_envs=2, seed=0)\n"
        "heavy = ('matplotlib.pyplot', 'seaborn', 'scipy.stats')\n"
        "print([m for m in heavy if m in sys.modules])\n"
        "from gymnax.environments.misc import pong\n"
        "palette = pong.sns.color_palette\n"  # a renderer's first read imports seaborn
        "import seaborn\n"
        "print(palette is seaborn.color_palette, type(seaborn).__name__,\n"
        "      pong.plt.figure is sys.modules['matplotlib.pyplot'].figure)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    before, after = proc.stdout.strip().splitlines()
    assert before == "[]", proc.stdout
    assert after == "True module True", proc.stdout


def test_a_plotting_module_imported_before_is_left_as_it_is():
    code = (
        "import sys, seaborn\n"
        "from rljax.envs.gymnax_import import gymnax\n"
        "gymnax()\n"
        "from gymnax.environments.misc import pong\n"
        "print(pong.sns is seaborn, 'gymnax' in sys.modules)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "True True", proc.stdout
