"""Installed package versions: the one helper doctor, manifests and version checks use."""
from __future__ import annotations

from importlib import metadata
from typing import Iterable, Optional


def package_version(pkg: str) -> Optional[str]:
    """The installed version of `pkg` (import name or distribution name), or None."""
    for name in dict.fromkeys((pkg, pkg.replace("_", "-"))):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def package_versions(pkgs: Iterable[str]) -> dict[str, str]:
    """{package: version} for the installed ones among `pkgs`."""
    out = {}
    for pkg in pkgs:
        version = package_version(pkg)
        if version is not None:
            out[pkg] = version
    return out


def older_than(have: str, floor: str) -> bool:
    """True when version `have` is below `floor` (PEP 440); False when either does not parse."""
    try:
        from packaging.version import Version

        return Version(have) < Version(floor)
    except Exception:
        return False
