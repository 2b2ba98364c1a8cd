"""Rollouts of a new revision of a model: analysis gates (``gates``)."""
