"""Filters: plugins that drop candidate regions, each with a reason (``routing.Filter`` over
region names, for a ``DecisionContext``)."""
