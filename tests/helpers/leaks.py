"""Where a secret was written down."""

from __future__ import annotations

from pathlib import Path

from nanomem.home import Home


def secret_free_files(home: Home, secret: str) -> list[Path]:
    """Every file under the home but config.toml that contains the secret."""
    return [
        path
        for path in home.root.rglob("*")
        if path.is_file() and path != home.config and secret.encode() in path.read_bytes()
    ]
