"""``python -m tilelayout``: the ``tilelayout`` command (see ``tilelayout.cli``)."""
import sys

from .cli import main

sys.exit(main())
