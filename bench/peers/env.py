"""Peer frameworks for `bench sft --peers`: each installed on demand into its own venv under the cache.

`~/.cache/swiftbox/peers/<name>/` is a plain venv whose site-packages carries a `.pth` line pointing at the
installing interpreter's site-packages (a `--system-site-packages` onto *this* environment): the peer reuses the
torch already installed here and never pulls one of its own (a CUDA torch on a CPU box is ~3 GB and wrong). pip
runs with a constraint pinning torch to the installed version, so a peer that needs another torch fails to
install instead of replacing it. Everything the peer pins differently (transformers, trl, peft, ...) lands in
the peer's own site-packages, which comes first on its sys.path. A marker file records what was installed;
a second call is a no-op.

    python bench/peers/env.py install [ms-swift] [llamafactory]     # logs to the venv's install.log
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

# what each peer is installed from (PyPI names, exact versions: the table in docs/benchmarks.md names them)
PEERS: dict[str, list[str]] = {
    "ms-swift": ["ms-swift==4.6.0"],
    # its peft (0.18) imports a torchao symbol that the torchao installed here (0.18) no longer has
    "llamafactory": ["llamafactory==0.9.5", "torchao==0.14.1"],
}


def cache_root() -> Path:
    base = os.environ.get("SWIFTBOX_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "swiftbox")
    return Path(base) / "peers"


def venv_dir(name: str) -> Path:
    return cache_root() / name


def python_of(name: str) -> Path:
    return venv_dir(name) / "bin" / "python"


def installed(name: str) -> bool:
    marker = venv_dir(name) / "installed.json"
    if not marker.is_file():
        return False
    try:
        return json.loads(marker.read_text()).get("requirements") == PEERS[name]
    except (OSError, ValueError):
        return False


def torch_version() -> str:
    from importlib.metadata import version

    return version("torch")


def install(name: str, log=sys.stderr) -> Path:
    """Make (or reuse) the peer's venv; returns its python. Raises RuntimeError with the log's path on failure."""
    if name not in PEERS:
        raise ValueError(f"unknown peer {name!r}; known: {', '.join(PEERS)}")
    if installed(name):
        return python_of(name)
    root = venv_dir(name)
    root.mkdir(parents=True, exist_ok=True)
    logfile = root / "install.log"
    with open(logfile, "a") as out:
        def sh(*cmd: str) -> None:
            out.write("$ " + " ".join(cmd) + "\n")
            out.flush()
            subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, check=True)

        try:
            if not python_of(name).exists():
                sh(sys.executable, "-m", "venv", str(root))
            probe = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
            site = subprocess.run([str(python_of(name)), "-c", probe], capture_output=True, text=True,
                                  check=True).stdout.strip()
            # appended after the venv's own site-packages: the peer's pins win, torch comes from here
            Path(site, "swiftbox_base.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
            constraints = root / "constraints.txt"
            constraints.write_text(f"torch=={torch_version()}\n")
            sh(str(python_of(name)), "-m", "pip", "install", "-c", str(constraints), *PEERS[name])
            drop_broken_extensions(name, sh)
        except subprocess.CalledProcessError as exc:
            raise RuntimeError(f"installing {name} failed ({exc.returncode}); see {logfile}") from exc
    (root / "installed.json").write_text(json.dumps({"requirements": PEERS[name], "torch": torch_version()}))
    print(f"peer {name}: installed into {root}", file=log)
    return python_of(name)


# torch extensions a peer may pull from the index: their PyPI wheels are built against the index's (CUDA) torch, so
# next to this torch they fail to load - and transformers then fails to import Trainer. Text training needs none.
TORCH_EXTENSIONS = ("torchvision", "torchaudio")


def drop_broken_extensions(name: str, sh) -> None:
    for pkg in TORCH_EXTENSIONS:
        probe = subprocess.run([str(python_of(name)), "-c", f"import {pkg}"], capture_output=True)
        found = subprocess.run([str(python_of(name)), "-m", "pip", "show", "-q", pkg], capture_output=True)
        if probe.returncode and found.returncode == 0:
            sh(str(python_of(name)), "-m", "pip", "uninstall", "-y", pkg)


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] != "install":
        sys.exit(__doc__)
    for peer in sys.argv[2:] or list(PEERS):
        install(peer)
