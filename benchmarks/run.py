"""The benchmark suite; same as ``rljax bench``: ``python -m benchmarks.run [options]``."""

import sys

from rljax.run.bench import main

if __name__ == "__main__":
    sys.exit(main())
