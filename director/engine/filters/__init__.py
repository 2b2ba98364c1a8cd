"""Filters: plugins that drop candidate regions, each with a reason."""
