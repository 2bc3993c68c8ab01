"""LangChain's own standard test suites (langchain-tests) for Footnote's public components."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_tests.integration_tests import (
    EmbeddingsIntegrationTests,
    RetrieversIntegrationTests,
    ToolsIntegrationTests,
)
from langchain_tests.unit_tests import EmbeddingsUnitTests, ToolsUnitTests

from footnote import FootnoteRetriever, MiniLMEmbeddings, answer_tool


class TestMiniLMEmbeddingsUnit(EmbeddingsUnitTests):
    @property
    def embeddings_class(self) -> type[MiniLMEmbeddings]:
        return MiniLMEmbeddings


class TestMiniLMEmbeddingsIntegration(EmbeddingsIntegrationTests):
    @property
    def embeddings_class(self) -> type[MiniLMEmbeddings]:
        return MiniLMEmbeddings


class TestFootnoteRetriever(RetrieversIntegrationTests):
    """Over the sample handbook's index (built once per session)."""

    @pytest.fixture(autouse=True)
    def _handbook(self, handbook_index: Path) -> None:
        self.index = handbook_index

    @property
    def retriever_constructor(self) -> type[FootnoteRetriever]:
        return FootnoteRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"index": str(self.index), "k": 4}

    @property
    def retriever_query_example(self) -> str:
        return "How often do I have to change my API key?"


class _AnswerToolSuite:
    """`answer_tool` over the sample handbook's index, as LangChain's tool suites build it."""

    @pytest.fixture(autouse=True)
    def _handbook(self, handbook_index: Path) -> None:
        self.index = handbook_index

    @property
    def tool_constructor(self) -> Any:
        return answer_tool

    @property
    def tool_constructor_params(self) -> dict[str, Any]:
        return {"context": {"index_dir": str(self.index)}}

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return {"question": "How often do I have to change my API key?"}


class TestAnswerToolUnit(_AnswerToolSuite, ToolsUnitTests):
    pass


class TestAnswerToolIntegration(_AnswerToolSuite, ToolsIntegrationTests):
    pass
