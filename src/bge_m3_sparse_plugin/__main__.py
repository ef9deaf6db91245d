"""``python -m bge_m3_sparse_plugin``: the same as the ``bge-m3-sparse`` command."""

import sys

from ._cli import main

if __name__ == "__main__":
    sys.exit(main())
