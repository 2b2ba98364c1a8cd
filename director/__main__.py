"""``python -m director``: the same as the ``director`` command."""

from director.cli import main

main()
