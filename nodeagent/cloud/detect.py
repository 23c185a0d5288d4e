"""Which cloud the node runs on, told by its own DMI strings: no request leaves the node,
so off the clouds the early warnings cost nothing.

The strings each cloud's VMs carry (its documentation on identifying instances): EC2
``Amazon EC2`` in the system or BIOS vendor (Xen-era instances ``amazon`` in the BIOS
version); Compute Engine ``Google`` and the product ``Google Compute Engine``; Azure the
chassis asset tag ``7783-7084-3265-9085-8269-3286-77`` (a Hyper-V VM elsewhere says
``Microsoft Corporation`` too, so the vendor alone is not Azure).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from nodeagent.types import Cloud

DMI_DIR = "/sys/class/dmi/id"
FIELDS = ("sys_vendor", "product_name", "product_version", "bios_vendor", "bios_version")
AZURE_ASSET_TAG = "7783-7084-3265-9085-8269-3286-77"


def cloud_of(dmi: Mapping[str, str]) -> Cloud:
    """The cloud the DMI strings name, or OFF."""
    if dmi.get("chassis_asset_tag", "").strip() == AZURE_ASSET_TAG:
        return Cloud.AZURE
    text = " ".join(dmi.get(f, "") for f in FIELDS).lower()
    if "amazon" in text:
        return Cloud.AWS
    if "google" in text:
        return Cloud.GCP
    return Cloud.OFF


def read_dmi(root: str = DMI_DIR) -> dict[str, str]:
    """The DMI strings the kernel shows (those it does not are left out)."""
    out = {}
    for name in (*FIELDS, "chassis_asset_tag"):
        try:
            out[name] = (Path(root) / name).read_text(errors="replace").strip()
        except OSError:
            continue
    return out
