"""The chat page's scripts share one global scope (classic `<script>` tags): a top-level
function or variable declared in two of them is silently replaced by the later one, as a
library `progressText` once replaced the answer's and turned every step into "Working…"."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

UI = Path(__file__).resolve().parents[1] / "footnote" / "server" / "ui"
TOP_LEVEL = re.compile(r"^(?:async\s+)?(?:function\*?\s+(\w+)|(?:const|let|var|class)\s+(\w+))",
                       re.MULTILINE)  # fmt: skip


def test_the_page_scripts_declare_each_global_name_once() -> None:
    page = (UI / "index.html").read_text(encoding="utf-8")
    scripts = re.findall(r'<script src="/ui/([\w.-]+\.js)"', page)
    assert len(scripts) >= 5, scripts
    declared: dict[str, list[str]] = defaultdict(list)
    for script in scripts:
        for match in TOP_LEVEL.finditer((UI / script).read_text(encoding="utf-8")):
            declared[match.group(1) or match.group(2)].append(script)
    twice = {name: where for name, where in declared.items() if len(where) > 1}
    assert not twice, twice
