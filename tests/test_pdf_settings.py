"""Reading PDFs does not depend on pypdf's deprecated module constants: pypdf takes
`JBIG2DEC_BINARY` from `shutil.which` the first time it opens a PDF and refused every later
one when it disagreed with its configuration, so a host whose PATH changed (or a test that
stood in for `shutil.which`) could read no PDF for the rest of the process."""

from __future__ import annotations

from pathlib import Path

import pytest

from footnote.ingest.parsers import parse_file
from tests.hostile_files import minimal_pdf


def test_a_pdf_is_read_whatever_pypdf_found_on_path_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pypdf.filters

    monkeypatch.setattr(pypdf.filters, "JBIG2DEC_BINARY", str(tmp_path / "jbig2dec"))
    path = tmp_path / "page.pdf"
    path.write_bytes(minimal_pdf(["The quokka smiles."]))
    document = parse_file(path, "page.pdf")
    assert "quokka" in document.sections[0].text
