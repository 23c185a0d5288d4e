"""The latest own Node the node watch delivered; loops that wait for a state wait here."""

from __future__ import annotations

import threading
from collections.abc import Callable

from nodeagent.kube.client import JSON


class NodeMirror:
    def __init__(self) -> None:
        self._node: JSON | None = None
        self._changed = threading.Condition()

    def set(self, node: JSON) -> None:
        with self._changed:
            self._node = node
            self._changed.notify_all()

    def get(self) -> JSON | None:
        with self._changed:
            return self._node

    def wait(self, predicate: Callable[[JSON], bool], timeout: float) -> JSON | None:
        """The Node once `predicate` holds for it, or the latest one after `timeout`."""
        with self._changed:
            self._changed.wait_for(
                lambda: self._node is not None and predicate(self._node), timeout
            )
            return self._node
