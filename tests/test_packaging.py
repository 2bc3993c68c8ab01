"""The package as others install it: one top-level package in the wheel, importable beside a
host's own `tools.py` and `graph/`, and `footnote serve` / `footnote eval` working from the
installed wheel rather than from this checkout."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[1]
QUESTION = "How often do I have to change my API key?"

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel built from the files git would ship (tracked, or new and not ignored)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    source = tmp_path_factory.mktemp("source")
    for name in filter(None, listed.split("\0")):
        path = REPO / name
        if path.is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, source / name)
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(source),
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (built,) = out.glob("footnote_rag-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel installed into a folder of its own (dependencies come from this venv)."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-compile",
            "-q",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return target


def wheel_env(installed: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(installed), "TOKENIZERS_PARALLELISM": "false"}
    env.pop("FOOTNOTE_INDEX", None)
    return env


def test_wheel_installs_only_the_footnote_package(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {
        name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")
    }
    assert top_level == {"footnote"}
    for module in (
        "graph/graph.py",
        "tools/langchain_retriever.py",
        "ingest/pipeline.py",
        "store/base.py",
    ):
        assert f"footnote/{module}" in names, module
    shipped = {name for name in names if name.endswith(".py")}
    missing = sorted(
        f"footnote/{path.relative_to(REPO).as_posix()}".replace("footnote/footnote/", "footnote/")
        for folder in ("footnote", "graph", "tools", "ingest", "models", "store")
        for path in (REPO / folder).rglob("*.py")
        if "__pycache__" not in path.parts
    )
    missing = [name for name in missing if name not in shipped]
    assert missing == [], f"modules the wheel leaves out (pyproject's packages): {missing}"
    assert "footnote/models/data/minilm_tokenizer.json" in names
    assert "footnote/graph/grader.json" in names, "the calibrated grader ships with the package"
    assert "footnote/py.typed" in names, "type checkers read the annotations in host projects"
    assert "footnote/server/ui/favicon.svg" in names, "the icon the chat page declares"


def test_graph_imports_beside_a_hosts_own_tools_and_graph(
    installed: Path, tmp_path: Path, handbook_index: Path
) -> None:
    host = tmp_path / "host_app"
    (host / "graph").mkdir(parents=True)
    (host / "tools.py").write_text("HOST = 'tools'\n", encoding="utf-8")
    (host / "graph" / "__init__.py").write_text("HOST = 'graph'\n", encoding="utf-8")
    probe = f"""
import json, footnote, graph, tools
from footnote import make_graph, FootnoteRetriever
out = make_graph().invoke(
    {{"messages": [{{"role": "user", "content": {QUESTION!r}}}]}},
    context={{"index_dir": {str(handbook_index)!r}}},
)
docs = FootnoteRetriever(index={str(handbook_index)!r}, k=1).invoke("key rotation")
print(json.dumps({{"host": [graph.HOST, tools.HOST], "footnote": footnote.__file__,
                  "answer": out["messages"][-1].content, "doc": docs[0].id}}))
"""
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=host,
        env=wheel_env(installed),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["host"] == ["graph", "tools"], "the host's own modules stay its own"
    assert seen["footnote"].startswith(str(installed)), "footnote came from the wheel"
    assert "90 days" in seen["answer"]
    assert seen["doc"].startswith("keys.md#")


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def served_from_wheel(installed: Path, tmp_path: Path, handbook_index: Path) -> Iterator[str]:
    """`footnote serve` run from the installed wheel, in a directory outside the checkout."""
    port = free_port()
    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    log = tmp_path / "serve.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "footnote.cli.main",
                "serve",
                "--index",
                str(handbook_index),
                "--port",
                str(port),
            ],
            cwd=workdir,
            env=wheel_env(installed),
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        pause = threading.Event()
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            assert process.poll() is None, log.read_text(errors="replace")[-3000:]
            try:
                if httpx.get(f"{url}/ok", timeout=1.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            pause.wait(0.3)
        else:
            pytest.fail(f"not ready:\n{log.read_text(errors='replace')[-3000:]}")
        yield url
    finally:
        # serve waits on `langgraph dev`: stop the whole session it started, by its id.
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)


def test_serve_works_from_the_installed_wheel(served_from_wheel: str) -> None:
    from langgraph_sdk import get_sync_client

    client = get_sync_client(url=served_from_wheel)
    output = client.runs.wait(
        None, "footnote", input={"messages": [{"role": "user", "content": QUESTION}]}
    )
    assert "90 days" in output["messages"][-1]["content"]
    assert output["citations"][0]["source"] == "keys.md"


def test_eval_works_from_the_installed_wheel(installed: Path, tmp_path: Path) -> None:
    dataset = tmp_path / "beir_tiny"
    shutil.copytree(REPO / "tests" / "fixtures" / "beir_tiny", dataset)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "footnote.cli.main",
            "eval",
            str(dataset),
            "--stages",
            "bm25",
            "--json",
            "--quiet",
        ],
        cwd=tmp_path,
        env=wheel_env(installed),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "bm25" in json.loads(result.stdout)["stages"]


def test_checkout_config_names_the_same_graph() -> None:
    """The repository's langgraph.json (for `langgraph dev` in a checkout) names by path the
    module `footnote serve` names by import."""
    import importlib.util

    from footnote.server.langgraph_dev import GRAPH

    config = json.loads((REPO / "langgraph.json").read_text(encoding="utf-8"))
    path, attribute = config["graphs"]["footnote"].split(":")
    module, served_attribute = GRAPH.split(":")
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None
    assert (REPO / path).resolve() == Path(spec.origin).resolve()
    assert attribute == served_attribute


def test_the_container_image_copies_every_folder_the_package_installs() -> None:
    """deploy/Dockerfile builds the wheel from copied folders: one left out (as `models/`
    was when it moved) would build an image that fails at import."""
    import tomllib

    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    folders = set(config["tool"]["setuptools"]["package-dir"].values())
    dockerfile = (REPO / "deploy" / "Dockerfile").read_text(encoding="utf-8")
    copied = {line.split()[1] for line in dockerfile.splitlines() if line.startswith("COPY ")}
    assert folders <= copied, f"not copied into the image: {sorted(folders - copied)}"
