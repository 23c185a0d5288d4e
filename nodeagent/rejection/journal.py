"""The on-disk journal of re-creations in flight: the one step the API cannot remember.

A re-created pod is deleted before it is created again, so between the two its spec
exists nowhere in the API. The intent is written here first, one small JSON file per
pod, replaced atomically, and dropped once the new pod exists.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from nodeagent.kube.client import JSON

log = logging.getLogger(__name__)


@dataclass
class Recreation:
    """A journalled re-creation: written before the delete, dropped after the create."""

    namespace: str
    name: str
    old_uid: str
    count: int  # the re-created pod's nodeagent.io/recreations
    due: float  # wall clock when the backoff ends
    reason: str  # the kubelet's rejection reason
    manifest: JSON

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class Journal:
    """One JSON file per pod under `directory`, replaced atomically (tmp, fsync, rename)."""

    def __init__(self, directory: str) -> None:
        self.dir = Path(directory)

    def path(self, namespace: str, name: str) -> Path:
        # Namespaces and pod names never contain "_": the file name is unambiguous.
        return self.dir / f"{namespace}_{name}.json"

    def write(self, entry: Recreation) -> None:
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        final = self.path(entry.namespace, entry.name)
        tmp = final.with_suffix(".tmp")
        # 0600: the manifest is the pod's whole spec, environment values included.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(asdict(entry), fh)
            fh.flush()
            os.fsync(fh.fileno())
        tmp.replace(final)
        self._sync_dir()

    def read(self, namespace: str, name: str) -> Recreation | None:
        return self._load(self.path(namespace, name))

    def drop(self, entry: Recreation) -> None:
        path = self.path(entry.namespace, entry.name)
        current = self._load(path)
        if current is not None and current.old_uid == entry.old_uid:
            path.unlink(missing_ok=True)
            self._sync_dir()

    def entries(self) -> list[Recreation]:
        if not self.dir.is_dir():
            return []
        found = (self._load(p) for p in sorted(self.dir.glob("*.json")))
        return [e for e in found if e is not None]

    def _load(self, path: Path) -> Recreation | None:
        try:
            return Recreation(**json.loads(path.read_text()))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError) as exc:
            log.error("journal %s unreadable, ignored: %s", path, exc)
            return None

    def _sync_dir(self) -> None:
        fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
