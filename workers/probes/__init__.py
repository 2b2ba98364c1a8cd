"""Plain probe functions, one module each; Celery tasks in :mod:`workers.tasks` wrap them."""
