"""Makes ``buffers_reference`` (plain NumPy references) importable under
``--import-mode=importlib``, which does not put test folders on ``sys.path``."""

import pathlib
import sys

_HERE = str(pathlib.Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
