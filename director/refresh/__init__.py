"""The global tier's view of the shared state: the decision engine's immutable snapshot,
derived from a :mod:`state` read (:mod:`~director.refresh.derive`) and kept fresh in the
background (:mod:`~director.refresh.refresher`)."""

from director.refresh.refresher import SnapshotRefresher

__all__ = ["SnapshotRefresher"]
