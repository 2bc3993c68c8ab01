"""How a cited location reads on the command line: `keys.md, § API keys > Rotation, lines 13-19`."""

from __future__ import annotations

from typing import Any


def format_location(item: dict[str, Any]) -> str:
    parts = [item["source"]]
    if item.get("section"):
        parts.append(f"§ {item['section']}")
    if item.get("page"):
        parts.append(f"p. {item['page']}")
    if item.get("lines"):
        parts.append(f"lines {item['lines'][0]}-{item['lines'][1]}")
    if item.get("url") and item["url"] != item["source"]:
        parts.append(item["url"])
    return ", ".join(parts)
