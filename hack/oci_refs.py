"""Tags each architecture's manifest in an OCI archive's index.json, beside the image index
that buildah wrote there under the version tag: ``<version>-<arch>``, with its platform.

A runtime or registry client resolves the version tag to the index and picks its platform
there; tools that follow no index (umoci, which tests/test_image.py and Flatcar's unit use to
unpack a root) take an architecture's tag. Rewrites the archive in place.

Usage: python hack/oci_refs.py ARCHIVE VERSION
"""

from __future__ import annotations

import io
import json
import sys
import tarfile
from pathlib import Path
from typing import Any

REF = "org.opencontainers.image.ref.name"
INDEX = "application/vnd.oci.image.index.v1+json"


def _json(archive: tarfile.TarFile, name: str) -> Any:
    handle = archive.extractfile(name)
    if handle is None:
        raise ValueError(f"{name} missing")
    return json.load(handle)


def tagged_index(archive: tarfile.TarFile, version: str) -> dict[str, Any]:
    """index.json with each platform's manifest of the version's image index added."""
    top = _json(archive, "index.json")
    (entry,) = [m for m in top["manifests"] if m.get("annotations", {}).get(REF) == version]
    if entry["mediaType"] != INDEX:
        raise ValueError(f"{version} is a {entry['mediaType']}, not an image index")
    nested = _json(archive, "blobs/" + entry["digest"].replace(":", "/"))
    kept = [m for m in top["manifests"] if m is entry or REF not in m.get("annotations", {})]
    for manifest in nested["manifests"]:
        arch = manifest["platform"]["architecture"]
        kept.append({**manifest, "annotations": {REF: f"{version}-{arch}"}})
    return {**top, "manifests": kept}


def main(path: Path, version: str) -> None:
    with tarfile.open(path) as archive:
        index = tagged_index(archive, version)
    data = json.dumps(index).encode()
    out = path.with_suffix(".tmp")
    with tarfile.open(path) as src, tarfile.open(out, "w") as dst:
        for member in src:
            if member.name == "index.json":
                member.size = len(data)
                dst.addfile(member, io.BytesIO(data))
            else:
                dst.addfile(member, src.extractfile(member) if member.isfile() else None)
    out.replace(path)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: hack/oci_refs.py ARCHIVE VERSION")
    try:
        main(Path(sys.argv[1]), sys.argv[2])
    except (OSError, ValueError, KeyError, tarfile.TarError) as err:
        sys.exit(f"hack/oci_refs.py: {err}")
