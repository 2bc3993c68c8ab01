"""One caller: `store.types.Caller` is the only shape of "who is asking", made once at each
edge by its named constructors and carried from there (issue 40)."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from footnote.graph.context import Context
from footnote.graph.indexer import READER_FIELDS, readable_documents
from footnote.graph.search_tool import run_caller, served_caller
from footnote.mcp.tools import McpSession
from footnote.store.types import EVERYONE, Caller, Chunk
from footnote.tools.search import SearchRequest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("store", "models", "ingest", "tools", "graph", "footnote")


def test_there_is_exactly_one_class_named_caller() -> None:
    homes = [
        str(path.relative_to(ROOT))
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ClassDef) and node.name == "Caller"
    ]
    assert homes == ["store/types.py"]


def test_a_search_request_carries_a_caller_not_its_parts() -> None:
    fields = {f.name for f in dataclasses.fields(SearchRequest)}
    assert "caller" in fields and not fields & {"user_groups", "groups", "admin"}
    assert SearchRequest(query="q", index_dir="i").caller == Caller(frozenset({EVERYONE}))


def test_mcp_sessions_carry_the_caller_beside_transport_details() -> None:
    fields = {f.name for f in dataclasses.fields(McpSession)}
    assert fields == {"caller", "forward", "base_url"}


def test_of_groups_adds_everyone_unless_strict() -> None:
    assert Caller.of_groups(["hr"]) == Caller(frozenset({"hr", EVERYONE}))
    assert Caller.of_groups([]) == Caller(frozenset({EVERYONE}))
    assert Caller.of_groups(["hr"], strict=True) == Caller(frozenset({"hr"}))
    assert Caller.of_groups([], strict=True).groups == frozenset()
    assert Caller.of_groups(["hr", ""], strict=True).groups == {"hr"}, "empty names dropped"
    assert Caller.of_groups([" hr "], strict=True).groups == {" hr "}, "names never trimmed"
    assert Caller.of_groups(["hr"], admin=True).admin


@pytest.mark.parametrize("groups", ["hr", ["hr", 1]])
def test_of_groups_refuses_what_is_not_a_list_of_names(groups: object) -> None:
    with pytest.raises(TypeError, match="list of group names"):
        Caller.of_groups(groups)


def test_the_operator_sees_everything_as_no_group() -> None:
    operator = Caller.operator()
    assert operator.admin and operator.groups == frozenset()
    assert operator.may_see(Chunk(id="a#b:0", text="t", source="a", title="a", section="b"))


def test_an_embedded_run_makes_one_caller_from_its_context() -> None:
    assert run_caller(Context(user_groups=["hr"])) == Caller(frozenset({"hr", EVERYONE}))
    strict = run_caller(Context(user_groups=["hr"], strict_groups=True, admin=True))
    assert strict == Caller(frozenset({"hr"}), admin=True)


def test_a_served_user_is_exactly_its_groups_and_malformed_ones_are_none() -> None:
    user = {"groups": ["hr", EVERYONE], "admin": True}
    assert served_caller(user) == Caller(frozenset({"hr", EVERYONE}), admin=True)
    assert served_caller({"groups": ["hr"]}) == Caller(frozenset({"hr"})), "nothing added"
    assert served_caller({"groups": "hr", "admin": "yes"}) == Caller(frozenset())
    assert served_caller({}) == Caller(frozenset())


def test_the_library_lists_what_the_caller_may_read() -> None:
    def document(source: str, access: list[str] | None, restricted: str | None = None) -> dict:
        fields = dict.fromkeys(READER_FIELDS, 0)
        return {**fields, "source": source, "access": access, "restricted": restricted}

    listing = {
        "documents": [
            document("open.md", [EVERYONE]),
            document("pay.md", ["hr"]),
            document("bad.md", ["hr"], restricted="unreadable front matter"),
            document("none.md", None),
        ]
    }
    reader = readable_documents(listing, Caller.of_groups(["hr"]))
    assert [d["source"] for d in reader] == ["open.md", "pay.md"]
    assert all(set(d) == set(READER_FIELDS) for d in reader), "readers learn the brief fields"
    everything = readable_documents(listing, Caller.operator())
    assert everything == listing["documents"]
    assert readable_documents(listing, Caller(frozenset())) == []
