"""Text from pictures of text: images, and the pages of scanned PDFs, through Tesseract.

Tesseract is Debian's `tesseract-ocr` program, found on PATH; Pillow (the `ocr` extra)
checks and decodes each image first, so Tesseract only ever reads a grayscale PNG that
Pillow wrote, never the file as it came. An image over `MAX_PIXELS` (a decompression bomb,
or a poster scanned at 1200 dpi) is refused before it is decoded; each image's recognition
runs under `OCR_TIMEOUT` and the file's own time budget, and is killed past either.
Without Tesseract or Pillow the reason says how to install them.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from footnote.ingest.documents import ParsedDocument, ParseError, Section
from footnote.models.providers import install_hint

IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp", ".gif", ".webp"})
MAX_PIXELS = 50_000_000
"""Pixels one image may have: an A4 page scanned at 600 dpi is 35 million."""
MAX_FRAMES = 500
"""Pages one image file (a multi-page TIFF) may hold."""
OCR_TIMEOUT = 120.0
"""Seconds Tesseract may take on one image."""
INSTALL_HINT = "install Debian's tesseract-ocr (apt-get install tesseract-ocr)"


def tesseract() -> str | None:
    """The Tesseract program, when it is installed."""
    return shutil.which("tesseract")


def missing() -> str:
    """What to install for OCR to run here, said as the commands that install it; "" when
    Tesseract and Pillow are both there. The base install has no Pillow (the `ocr` extra), so
    a machine with Tesseract alone would otherwise read a scan as a PDF with no text."""
    needs = [] if tesseract() else [INSTALL_HINT]
    try:
        import PIL  # noqa: F401  (only whether it imports)
    except ImportError:
        needs.append(f"install Pillow: {install_hint('ocr')}")
    return " and ".join(needs)


def parse_image(data: bytes, path: Path, source: str) -> ParsedDocument:
    if tesseract() is None:
        raise ParseError(f"reading text in images needs OCR: {INSTALL_HINT}")
    image_module = _pillow()
    try:
        image = image_module.open(io.BytesIO(data))
        frames = getattr(image, "n_frames", 1)
    except Exception as exc:  # Pillow raises many types on a broken or unknown image
        raise ParseError(f"not a readable image ({type(exc).__name__})") from exc
    if frames > MAX_FRAMES:
        raise ParseError(f"{frames:,} pages in one image, over {MAX_FRAMES:,}")
    sections: list[Section] = []
    for number in range(1, frames + 1):
        try:
            image.seek(number - 1)
        except EOFError:
            break
        text = recognize(image, f"page {number}")
        if text:
            anchor = f"page-{number}" if frames > 1 else None
            sections.append(
                Section(
                    text=text,
                    page=number if frames > 1 else None,
                    anchor=anchor,
                    url=f"{source}#{anchor}" if anchor else source,
                )
            )
    if not sections:
        raise ParseError("no text found by OCR")
    return ParsedDocument(
        source=source, title=path.stem, sections=sections, metadata={"ocr": "tesseract"}
    )


def recognize(image: Any, what: str) -> str:
    """The text Tesseract reads in one Pillow image (checked against `MAX_PIXELS`)."""
    program = tesseract()
    if program is None:
        raise ParseError(f"reading text in images needs OCR: {INSTALL_HINT}")
    width, height = image.size
    if width * height > MAX_PIXELS:
        raise ParseError(f"{what}: an image of {width}×{height} pixels is over {MAX_PIXELS:,}")
    try:
        buffer = io.BytesIO()
        image.convert("L").save(buffer, format="PNG")
    except Exception as exc:
        raise ParseError(f"{what}: the image cannot be decoded ({type(exc).__name__})") from exc
    try:
        result = subprocess.run(
            [program, "stdin", "stdout"],
            input=buffer.getvalue(),
            capture_output=True,
            timeout=OCR_TIMEOUT,
            check=False,
            # One thread: ingest already runs files side by side on every core.
            env={**os.environ, "OMP_THREAD_LIMIT": "1"},
        )
    except subprocess.TimeoutExpired:
        raise ParseError(f"{what}: OCR took more than {OCR_TIMEOUT:g} s") from None
    except OSError as exc:
        raise ParseError(f"{what}: cannot run tesseract ({exc.strerror or exc})") from exc
    if result.returncode != 0:
        reason = result.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["failed"]
        raise ParseError(f"{what}: tesseract failed: {reason[0][:200]}")
    text = result.stdout.decode("utf-8", "replace").replace("\x00", "").replace("\f", "")
    lines = [" ".join(line.split()) for line in text.split("\n")]
    return "\n".join(lines).strip()


def _pillow() -> Any:
    try:
        from PIL import Image
    except ImportError as exc:
        raise ParseError(f"reading text in images needs Pillow: {install_hint('ocr')}") from exc
    return Image
