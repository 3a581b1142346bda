"""The example configs shipped with echo2: examples/*.yaml and the pool/price files in examples/pools/.

They install as package data of ``echo2_sdk.examples``, so ``echo2 train --task poker`` finds poker.yaml in a
wheel install as well as in a checkout. Configs name pool and price files relative to their own folder
(``prices_file: pools/prices.yaml``), and the install keeps that layout.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path


def folder() -> Path:
    """The folder that holds the shipped configs."""
    root = resources.files(__name__)
    if not isinstance(root, Path):  # the config loader opens files by path; a zipped install has none
        raise RuntimeError(f"echo2's example configs are inside an archive ({root}); install echo2 unzipped "
                           "(pip install echo2) to use --task NAME with a shipped example")
    return root


def config(name: str) -> Path | None:
    """``NAME.yaml`` among the shipped configs, or None (task names that are import paths never match)."""
    if not re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9_.-]*", name):
        return None
    path = folder() / f"{name}.yaml"
    return path if path.is_file() else None
