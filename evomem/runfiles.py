"""The files a DATA_DIR holds beside the stores: pid files and logs of ``evomem up``, and the URL of
the retrieval service that holds the embedded Qdrant store (so that another process can say where
to go instead)."""

from __future__ import annotations

from pathlib import Path


def run_dir(data_dir: Path) -> Path:
    return data_dir / "run"


def logs_dir(data_dir: Path) -> Path:
    return data_dir / "logs"


def service_url_file(data_dir: Path) -> Path:
    return run_dir(data_dir) / "service.url"


def service_url(data_dir: Path) -> str | None:
    """The URL of the service that holds this DATA_DIR's store, if one runs."""
    path = service_url_file(data_dir)
    return path.read_text().strip() if path.exists() else None


__all__ = ["logs_dir", "run_dir", "service_url", "service_url_file"]
