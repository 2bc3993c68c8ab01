"""Footnote from outside: a fresh virtual environment in a folder outside the checkout, the
built wheel installed into it, and LangChain's standard suites (retriever, embeddings, tool),
`answer_tool` in `create_agent` and the graph as a subgraph run there by pytest
(tests/host_project/host_checks.py).

Kept fast: the host's environment is new and holds only the wheel; its dependencies are the
ones this checkout's environment already has (one `.pth` line puts them after the host's own
site-packages), after checking that they satisfy every requirement the wheel declares. No
download, no resolver run, and nothing of the checkout is importable there: `footnote` comes
from the wheel, and the checkout's editable install is not active.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.conftest import HANDBOOK, REPO
from tests.test_packaging import wheel  # noqa: F401  (the fixture: the wheel, built once)

pytestmark = pytest.mark.integration

REQUIREMENTS_CHECK = """
import json, sys
from importlib.metadata import PackageNotFoundError, distribution, version
from packaging.requirements import Requirement
missing = []
for line in distribution("footnote-rag").requires or []:
    req = Requirement(line)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    try:
        found = version(req.name)
    except PackageNotFoundError:
        missing.append(f"{req}: not installed")
        continue
    if not req.specifier.contains(found, prereleases=True):
        missing.append(f"{req}: {found}")
print(json.dumps(missing))
"""


def host_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def make_host(root: Path, built: Path) -> tuple[Path, Path]:
    """A new venv under `root` with the wheel installed; returns (python, its site-packages)."""
    venv = root / ".venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    python = host_python(venv)
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps"]
        + ["--no-compile", "--disable-pip-version-check", "-q", str(built)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    host_site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    ours = [p for p in site.getsitepackages() if Path(p).is_dir()] or [
        sysconfig.get_paths()["purelib"]
    ]
    (host_site / "zz_dependencies.pth").write_text("\n".join(ours) + "\n", encoding="utf-8")
    return python, host_site


def host_env(host_site: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "FOOTNOTE_INDEX", "VIRTUAL_ENV")
    }
    env.update({"TOKENIZERS_PARALLELISM": "false", "LANGSMITH_TRACING": "false"})
    env["FOOTNOTE_HOST_SITE"] = str(host_site)
    env.update(extra)
    return env


def test_langchain_suites_pass_in_a_fresh_host_project(
    wheel: Path,  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    root = tmp_path_factory.mktemp("host-project")
    assert not root.resolve().is_relative_to(REPO), "the host lives outside the checkout"
    python, host_site = make_host(root, wheel)

    checked = subprocess.run(
        [str(python), "-c", REQUIREMENTS_CHECK],
        cwd=root,
        env=host_env(host_site),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert checked.returncode == 0, checked.stderr[-3000:]
    assert json.loads(checked.stdout) == [], "the wheel's requirements are all met"

    shutil.copytree(HANDBOOK, root / "docs")
    index = root / "index"
    ingested = subprocess.run(
        [str(python.parent / "footnote"), "ingest", "docs", "--index", str(index), "--quiet"],
        cwd=root,
        env=host_env(host_site),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ingested.returncode == 0, ingested.stderr[-3000:]

    shutil.copy(REPO / "tests" / "host_project" / "host_checks.py", root / "test_host.py")
    run = subprocess.run(
        [str(python), "-m", "pytest", "test_host.py", "-q", "-p", "no:cacheprovider"]
        + ["-o", "asyncio_mode=auto", "-W", "ignore::DeprecationWarning", "--rootdir", str(root)],
        cwd=root,
        env=host_env(host_site, FOOTNOTE_HOST_INDEX=str(index)),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    summary = run.stdout.strip().splitlines()[-1]
    assert "passed" in summary and "skipped" not in summary and "failed" not in summary, summary
