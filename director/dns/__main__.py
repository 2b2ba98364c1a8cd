"""``python -m director.dns``: see ``director.dns.cli``."""

from director.dns.cli import main

raise SystemExit(main())
