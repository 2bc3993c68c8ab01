"""How to install one of Footnote's optional extras, for the errors that name one (a
`postgresql://` index without the postgres extra, a provider's package, `footnote eval`).
A module of its own at the bottom layer, so the backends and the driver checks both use it."""

from __future__ import annotations


def install_command(extra: str) -> str:
    """The pip command that installs one of Footnote's extras where Footnote is installed.

    `pip install 'footnote-rag[eval]'` cannot work while footnote-rag is on no package index
    (it is installed from a checkout or a wheel), so the command names the extra's own
    requirements, read from the installed distribution's metadata."""
    from importlib.metadata import PackageNotFoundError, requires

    from packaging.requirements import Requirement

    try:
        declared = requires("footnote-rag") or []
    except PackageNotFoundError:
        declared = []
    wanted: list[str] = []
    for line in declared:
        requirement = Requirement(line)
        marker = requirement.marker
        if marker is None or not marker.evaluate({"extra": extra}):
            continue
        if marker.evaluate({"extra": ""}):  # a base requirement, already installed
            continue
        requirement.marker = None
        wanted.append(f"'{requirement}'")
    if not wanted:
        return f"install footnote-rag's {extra} extra"
    return f"pip install {' '.join(wanted)} (footnote-rag's {extra} extra)"
