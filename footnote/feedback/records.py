"""Answer feedback, stored durably: who rated which answer, how, and what that answer was.

One row per (user, thread, answer message). The row holds what the server read from the run's
own state when the rating came in — the question, the answer, its citations (chunk ids), the
passages it was chosen from, the "why" — never what a client claims about the answer, so a
review or an export describes what Footnote really did.

Where: `$FOOTNOTE_FEEDBACK_DB` (a file path or a `postgresql://` URL); unset, the server's
PostgreSQL when it has one (`$FOOTNOTE_CHECKPOINT_URL`, else a `postgresql://` index), otherwise
`feedback.sqlite3` beside the index directory. The server and `footnote feedback export` use the
same rule, so both find the same store.

The schema is versioned: `MIGRATIONS[i]` takes a store from version i to i + 1, applied in
order inside one transaction each, and the version is recorded in `footnote_feedback_schema`.
Opening a store brings it up to date; a store newer than this code is refused.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import secrets
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from footnote.store.backends import is_postgres, resolve_index

FEEDBACK_DB_ENV = "FOOTNOTE_FEEDBACK_DB"
SQLITE_NAME = "feedback.sqlite3"
MAX_COMMENT = 2000
"""Characters; a comment is a note for a reviewer, not a document."""
MAX_FLAGS = 50

MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (  # 1: the feedback table
        """CREATE TABLE footnote_feedback (
            id {serial} PRIMARY KEY,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            user_id TEXT NOT NULL,
            thread_id TEXT NOT NULL,
            message_id TEXT NOT NULL,
            run_id TEXT NOT NULL DEFAULT '',
            question TEXT NOT NULL,
            answer TEXT NOT NULL,
            not_covered INTEGER NOT NULL DEFAULT 0,
            citations TEXT NOT NULL DEFAULT '[]',
            rating INTEGER,
            comment TEXT NOT NULL DEFAULT '',
            wrong_citations TEXT NOT NULL DEFAULT '[]',
            index_name TEXT NOT NULL DEFAULT '',
            index_version TEXT NOT NULL DEFAULT '',
            why TEXT NOT NULL DEFAULT '{{}}',
            UNIQUE (user_id, thread_id, message_id)
        )""",
        "CREATE INDEX footnote_feedback_by_user ON footnote_feedback (user_id, id)",
    ),
    (  # 2: an admin's review of a "not covered" answer: should the documents cover it?
        "ALTER TABLE footnote_feedback ADD COLUMN should_cover INTEGER",
        "ALTER TABLE footnote_feedback ADD COLUMN reviewed_by TEXT NOT NULL DEFAULT ''",
        "CREATE INDEX footnote_feedback_for_review ON footnote_feedback (rating, not_covered, id)",
    ),
    (  # 3: the access the rated thread was served under, and an id that says nothing
        # (older rows' access is unknown, NULL: served to admins only, failing closed)
        "ALTER TABLE footnote_feedback ADD COLUMN access_scope TEXT",
        "ALTER TABLE footnote_feedback ADD COLUMN public_id TEXT",
        "UPDATE footnote_feedback SET public_id = {random_id} WHERE public_id IS NULL",
        "CREATE UNIQUE INDEX footnote_feedback_by_public_id ON footnote_feedback (public_id)",
    ),
)
SCHEMA_VERSION = len(MIGRATIONS)


class FeedbackError(ValueError):
    """Input the store refuses (HTTP 422), or a store it cannot use."""


def feedback_location(env: Mapping[str, str] | None = None, index: str | None = None) -> str:
    """Where feedback lives, by the rule in the module docstring."""
    env = os.environ if env is None else env
    if explicit := env.get(FEEDBACK_DB_ENV, "").strip():
        return explicit
    if checkpoint := env.get("FOOTNOTE_CHECKPOINT_URL", "").strip():
        return checkpoint
    index = resolve_index(index, env)
    if is_postgres(index):
        return index
    return str(Path(index).resolve().parent / SQLITE_NAME)


def _private_file(path: Path) -> None:
    """Make `path` (and its folder, if new) readable by its owner only, as index versions
    are: feedback holds users' questions and the answers they were given."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
    os.chmod(path, 0o600)  # one made before this rule, or under a wide umask


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="microseconds")


def new_feedback_id() -> str:
    """A random id: sequential numbers would tell one user how many others rated, and when."""
    return secrets.token_hex(16)


def uncovered_parts(parts: Any) -> list[str]:
    """The questions of the parts the documents did not cover, as the run reported its
    `parts`: a question in several parts may be answered in one part and not in another, and
    the part left unanswered is as much a gap for review as a whole "not covered" answer."""
    if not isinstance(parts, list):
        return []
    return [
        str(part.get("question", ""))
        for part in parts
        if isinstance(part, Mapping) and part.get("covered") is False
    ]


@dataclass
class Feedback:
    """One user's rating of one answer, with the answer as the server recorded it."""

    id: str
    """The row's public id (random); its order in the store is `row`."""
    created_at: str
    updated_at: str
    user_id: str
    thread_id: str
    message_id: str
    run_id: str
    question: str
    answer: str
    not_covered: bool
    citations: list[dict[str, Any]]
    rating: int | None
    """1 thumbs up, -1 thumbs down, None not rated (a recorded "not covered" answer)."""
    comment: str
    wrong_citations: list[int]
    """Citation numbers the user says do not support what they are cited for."""
    index_name: str
    index_version: str
    why: dict[str, Any] = field(repr=False)
    should_cover: bool | None = None
    """An admin's call on a "not covered" answer: True makes it a known corpus gap."""
    reviewed_by: str = ""
    access_scope: str | None = None
    """The rater's access (`Identity.scope`) when the answer was read: the thread's access.
    The row is served to its owner only while they still have exactly it, as the thread is."""
    row: int = 0
    """Its place in the store's order (newest first listings, `before`); never shown."""

    @property
    def uncovered_parts(self) -> list[str]:
        """The parts of the question the documents did not cover (from the run's why)."""
        return uncovered_parts(self.why.get("parts"))

    def public(self, *, with_why: bool = False) -> dict[str, Any]:
        """As JSON for the API; the why is large, so only on request. A reviewer is told
        which parts were not covered (`uncovered_parts`) without the why."""
        hidden = ("why", "row", "access_scope")
        data = {k: v for k, v in self.__dict__.items() if k not in hidden}
        data["uncovered_parts"] = self.uncovered_parts
        if with_why:
            data["why"] = self.why
        return data


_COLUMNS = (
    "id, created_at, updated_at, user_id, thread_id, message_id, run_id, question, answer, "
    "not_covered, citations, rating, comment, wrong_citations, index_name, index_version, why, "
    "should_cover, reviewed_by, access_scope, public_id"
)


def _row(values: Sequence[Any]) -> Feedback:
    (
        fid,
        created,
        updated,
        user,
        thread,
        message,
        run,
        question,
        answer,
        not_covered,
        citations,
        rating,
        comment,
        wrong,
        index_name,
        index_version,
        why,
        should,
        reviewed,
        scope,
        public_id,
    ) = values
    return Feedback(
        id=str(public_id),
        row=int(fid),
        access_scope=scope,
        created_at=created,
        updated_at=updated,
        user_id=user,
        thread_id=thread,
        message_id=message,
        run_id=run,
        question=question,
        answer=answer,
        not_covered=bool(not_covered),
        citations=json.loads(citations),
        rating=None if rating is None else int(rating),
        comment=comment,
        wrong_citations=json.loads(wrong),
        index_name=index_name,
        index_version=index_version,
        why=json.loads(why),
        should_cover=None if should is None else bool(should),
        reviewed_by=reviewed,
    )


def check_rating(value: Any) -> int | None:
    if value is None or (
        isinstance(value, int) and not isinstance(value, bool) and value in (1, -1)
    ):
        return value
    raise FeedbackError("rating must be 1 (up), -1 (down) or null")


def check_comment(value: Any) -> str:
    if not isinstance(value, str):
        raise FeedbackError("comment must be a string")
    if len(value) > MAX_COMMENT:
        raise FeedbackError(f"comment is longer than {MAX_COMMENT} characters")
    return value.strip()


def check_flags(value: Any, citations: Sequence[Mapping[str, Any]]) -> list[int]:
    """Citation numbers that exist in the answer, each once, in order."""
    known = {int(c["n"]) for c in citations if isinstance(c.get("n"), int)}
    if not isinstance(value, list) or len(value) > MAX_FLAGS:
        raise FeedbackError(f"wrong_citations must be a list of at most {MAX_FLAGS} numbers")
    flags = []
    for n in value:
        if not isinstance(n, int) or isinstance(n, bool) or n not in known:
            raise FeedbackError(f"wrong_citations: {n!r} is not a citation of this answer")
        if n not in flags:
            flags.append(n)
    return sorted(flags)


@dataclass(frozen=True)
class Filters:
    """What a listing shows; `user` None means everyone's (admins only, checked by the caller)."""

    user: str | None
    rating: int | None = None
    not_covered: bool | None = None
    review: bool = False
    """Rated down, or "not covered": what an admin reviews."""
    thread_id: str | None = None
    access_scope: str | None = None
    """Only rows rated under this access (a caller's own listing: the access they have now)."""
    limit: int = 50
    before_id: str | None = None
    """Only rows older than the one with this public id."""


class FeedbackStore:
    """SQLite or PostgreSQL behind one small API; every call opens its own connection, so the
    store is safe to use from the server's thread pool."""

    def __init__(self, location: str) -> None:
        self.location = location
        self.postgres = is_postgres(location)
        if not self.postgres:
            _private_file(Path(location))
        self.migrate()

    # ------------------------------------------------------------ connections and schema

    @contextmanager
    def _conn(self) -> Iterator[Any]:
        if self.postgres:
            import psycopg

            from footnote.store.postgres import parse_location

            with psycopg.connect(parse_location(self.location).conninfo) as conn:
                yield conn  # commits on a clean exit, rolls back on an exception
        else:
            lite = sqlite3.connect(self.location, timeout=30, isolation_level=None)
            try:
                lite.execute("BEGIN IMMEDIATE")
                yield lite
                lite.execute("COMMIT")
            except BaseException:
                lite.execute("ROLLBACK")
                raise
            finally:
                lite.close()

    def _sql(self, query: str) -> str:
        return query.replace("?", "%s") if self.postgres else query

    def version(self) -> int:
        with self._conn() as conn:
            return self._version(conn)

    def _version(self, conn: Any) -> int:
        conn.execute("CREATE TABLE IF NOT EXISTS footnote_feedback_schema (version INTEGER)")
        row = conn.execute("SELECT max(version) FROM footnote_feedback_schema").fetchone()
        return int(row[0] or 0)

    def migrate(self, target: int = SCHEMA_VERSION) -> int:
        """Apply the migrations this store lacks, up to `target`; returns the version."""
        serial = "BIGSERIAL" if self.postgres else "INTEGER"
        random_id = (
            "md5(random()::text || clock_timestamp()::text || id::text)"
            if self.postgres
            else "lower(hex(randomblob(16)))"
        )
        with self._conn() as conn:
            if self.postgres:  # two servers starting at once migrate one after the other
                conn.execute("SELECT pg_advisory_xact_lock(hashtext('footnote_feedback_schema'))")
            current = self._version(conn)
            if current > SCHEMA_VERSION:
                raise FeedbackError(
                    f"{self.location}: feedback schema {current} is newer than this Footnote "
                    f"({SCHEMA_VERSION}); upgrade Footnote"
                )
            for version in range(current, target):
                for statement in MIGRATIONS[version]:
                    conn.execute(statement.format(serial=serial, random_id=random_id))
                conn.execute(
                    self._sql("INSERT INTO footnote_feedback_schema (version) VALUES (?)"),
                    (version + 1,),
                )
            return max(current, target)

    # ------------------------------------------------------------ reads and writes

    def record(
        self,
        *,
        user: str,
        answer: Mapping[str, Any],
        rating: int | None,
        comment: str = "",
        wrong_citations: Sequence[int] = (),
        access_scope: str | None = None,
    ) -> Feedback:
        """Insert or replace this user's feedback on this answer. `answer` is what the server
        read from the run (see `footnote.feedback.why.answer_record`), under `access_scope`."""
        now = _now()
        values = (
            now,
            now,
            user,
            answer["thread_id"],
            answer["message_id"],
            answer.get("run_id", ""),
            answer["question"],
            answer["answer"],
            int(bool(answer["not_covered"])),
            json.dumps(answer["citations"]),
            rating,
            comment,
            json.dumps(list(wrong_citations)),
            answer.get("index_name", ""),
            answer.get("index_version", ""),
            json.dumps(answer.get("why", {})),
            access_scope,
            new_feedback_id(),
        )
        with self._conn() as conn:
            row = conn.execute(
                self._sql(
                    "INSERT INTO footnote_feedback (created_at, updated_at, user_id, thread_id, "
                    "message_id, run_id, question, answer, not_covered, citations, rating, "
                    "comment, wrong_citations, index_name, index_version, why, access_scope, "
                    "public_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT (user_id, thread_id, message_id) DO UPDATE SET "
                    "updated_at = excluded.updated_at, rating = excluded.rating, "
                    "access_scope = excluded.access_scope, "
                    "comment = excluded.comment, wrong_citations = excluded.wrong_citations "
                    f"RETURNING {_COLUMNS}"
                ),
                values,
            ).fetchone()
        return _row(row)

    def get(self, feedback_id: str) -> Feedback | None:
        """The row with this public id."""
        with self._conn() as conn:
            row = conn.execute(
                self._sql(f"SELECT {_COLUMNS} FROM footnote_feedback WHERE public_id = ?"),
                (str(feedback_id),),
            ).fetchone()
        return _row(row) if row else None

    def for_answer(self, thread_id: str, message_id: str) -> list[Feedback]:
        """Everyone's feedback on one answer (an admin reading its recorded why)."""
        with self._conn() as conn:
            rows = conn.execute(
                self._sql(
                    f"SELECT {_COLUMNS} FROM footnote_feedback "
                    "WHERE thread_id = ? AND message_id = ? ORDER BY id DESC"
                ),
                (thread_id, message_id),
            ).fetchall()
        return [_row(r) for r in rows]

    def update(self, feedback_id: str, changes: Mapping[str, Any]) -> Feedback:
        """Change rating, comment, wrong_citations, should_cover / reviewed_by (already
        validated by the caller); returns the updated row."""
        allowed = ("rating", "comment", "wrong_citations", "should_cover", "reviewed_by")
        sets, params = ["updated_at = ?"], [_now()]
        for name in allowed:
            if name in changes:
                value = changes[name]
                if name == "wrong_citations":
                    value = json.dumps(list(value))
                elif name == "should_cover" and value is not None:
                    value = int(bool(value))
                sets.append(f"{name} = ?")
                params.append(value)
        with self._conn() as conn:
            row = conn.execute(
                self._sql(
                    f"UPDATE footnote_feedback SET {', '.join(sets)} WHERE public_id = ? "
                    f"RETURNING {_COLUMNS}"
                ),
                (*params, str(feedback_id)),
            ).fetchone()
        if row is None:
            raise KeyError(feedback_id)
        return _row(row)

    def search(self, filters: Filters) -> list[Feedback]:
        """Newest first."""
        where: list[str] = []
        params: list[Any] = []
        if filters.user is not None:
            where.append("user_id = ?")
            params.append(filters.user)
        if filters.rating is not None:
            where.append("rating = ?")
            params.append(filters.rating)
        if filters.not_covered is not None:
            where.append("not_covered = ?")
            params.append(int(filters.not_covered))
        if filters.review:
            where.append("(rating = -1 OR not_covered = 1)")
        if filters.thread_id is not None:
            where.append("thread_id = ?")
            params.append(filters.thread_id)
        if filters.access_scope is not None:
            where.append("access_scope = ?")
            params.append(filters.access_scope)
        if filters.before_id is not None:
            where.append("id < (SELECT id FROM footnote_feedback WHERE public_id = ?)")
            params.append(filters.before_id)
        clause = f"WHERE {' AND '.join(where)} " if where else ""
        with self._conn() as conn:
            rows = conn.execute(
                self._sql(
                    f"SELECT {_COLUMNS} FROM footnote_feedback {clause}ORDER BY id DESC LIMIT ?"
                ),
                (*params, max(1, min(filters.limit, 500))),
            ).fetchall()
        return [_row(r) for r in rows]

    def all(self) -> list[Feedback]:
        """Every row, oldest first (the export)."""
        with self._conn() as conn:
            rows = conn.execute(f"SELECT {_COLUMNS} FROM footnote_feedback ORDER BY id").fetchall()
        return [_row(r) for r in rows]


# ---------------------------------------------------------------- LangSmith

LANGSMITH_KEY = "user_rating"


def tracing_on(env: Mapping[str, str] | None = None) -> bool:
    """The server's own rule: tracing is on when asked for and a key is present."""
    env = os.environ if env is None else env
    asked = any(
        env.get(name, "").strip().lower() in ("true", "1")
        for name in ("LANGSMITH_TRACING", "LANGCHAIN_TRACING_V2")
    )
    return asked and any(env.get(k) for k in ("LANGSMITH_API_KEY", "LANGCHAIN_API_KEY"))


def send_to_langsmith(row: Feedback, env: Mapping[str, str] | None = None) -> bool:
    """Attach the rating to the run's trace (the server's run id is the trace's root run).

    With tracing off nothing happens and nothing leaves the machine. One LangSmith feedback
    per row (a stable id derived from it), updated when the row is edited.
    """
    if not tracing_on(env) or not row.run_id:
        return False
    import uuid

    from langsmith import Client
    from langsmith.utils import LangSmithConflictError

    client = Client()
    feedback_id = uuid.uuid5(uuid.NAMESPACE_URL, f"footnote-feedback/{row.id}")
    score = None if row.rating is None else (1 if row.rating > 0 else 0)
    extra = {"wrong_citations": row.wrong_citations, "user": row.user_id}
    try:
        client.create_feedback(
            row.run_id,
            key=LANGSMITH_KEY,
            score=score,
            comment=row.comment or None,
            feedback_id=feedback_id,
            extra=extra,
        )
    except LangSmithConflictError:
        client.update_feedback(feedback_id, score=score, comment=row.comment or None)
    return True


# ---------------------------------------------------------------- export


@dataclass
class Export:
    queries: int
    judgements: int
    passages: int
    gaps: int


def _normalised(question: str) -> str:
    return " ".join(question.lower().split())


def export_beir(rows: Sequence[Feedback], directory: str | Path) -> Export:
    """A BEIR dataset from rated answers, for `footnote eval DIR` (and `--answers`).

    - thumbs up: the answer's cited chunks are relevant (score 1), except those flagged wrong;
    - "citation is wrong": that chunk is a judged negative (score 0) for the question;
    - "not covered" answers an admin marked should_cover: known gaps, in `gaps.jsonl` (no
      passage answers them yet, so retrieval metrics cannot use them; re-ask them after
      adding documents).
    The corpus is every passage the rated runs saw (their candidates and cited chunks), so
    each question is measured against the near misses it really met. The same question
    asked twice is one query; a later judgement of a chunk replaces an earlier one.
    """
    root = Path(directory)
    for folder in (root, root / "qrels"):  # folders it makes: 0700
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    corpus: dict[str, dict[str, str]] = {}
    queries: dict[str, str] = {}
    qrels: dict[str, dict[str, int]] = {}
    gaps: dict[str, str] = {}
    ids: dict[str, str] = {}
    for row in rows:
        key = _normalised(row.question)
        if not key:
            continue
        if row.not_covered and row.should_cover:
            # A question in several parts is a gap only in the parts left unanswered.
            several = len(row.why.get("parts") or []) > 1
            for gap in (row.uncovered_parts if several else []) or [row.question]:
                gaps[ids.setdefault(_normalised(gap), f"q{len(ids) + 1}")] = gap
            continue
        qid = ids.setdefault(key, f"q{len(ids) + 1}")
        by_n = {int(c["n"]): str(c.get("chunk_id") or "") for c in row.citations if "n" in c}
        judged: dict[str, int] = {}
        if row.rating == 1:
            judged.update(
                {cid: 1 for n, cid in by_n.items() if cid and n not in row.wrong_citations}
            )
        judged.update({by_n[n]: 0 for n in row.wrong_citations if by_n.get(n)})
        passages = row.why.get("passages") or {}
        judged = {cid: s for cid, s in judged.items() if cid in passages}
        if not judged:
            continue
        queries[qid] = row.question
        qrels.setdefault(qid, {}).update(judged)
        for cid, passage in passages.items():
            corpus[cid] = {
                "title": str(passage.get("title", "")),
                "text": str(passage.get("text", "")),
            }
    with _private_output(root / "corpus.jsonl") as out:
        for cid, passage in corpus.items():
            out.write(json.dumps({"_id": cid, **passage}, ensure_ascii=False) + "\n")
    with _private_output(root / "queries.jsonl") as out:
        for qid, text in queries.items():
            out.write(json.dumps({"_id": qid, "text": text}, ensure_ascii=False) + "\n")
    with _private_output(root / "qrels" / "test.tsv") as out:
        out.write("query-id\tcorpus-id\tscore\n")
        for qid, judged in qrels.items():
            for cid, score in judged.items():
                out.write(f"{qid}\t{cid}\t{score}\n")
    with _private_output(root / "gaps.jsonl") as out:
        for qid, text in gaps.items():
            out.write(json.dumps({"_id": qid, "text": text}, ensure_ascii=False) + "\n")
    return Export(
        queries=len(queries),
        judgements=sum(len(j) for j in qrels.values()),
        passages=len(corpus),
        gaps=len(gaps),
    )


def _private_output(path: Path) -> Any:
    """`path` opened for writing, readable by its owner only (0600), emptied first."""
    path.unlink(missing_ok=True)  # a file left by an older export keeps its mode otherwise
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    return os.fdopen(descriptor, "w", encoding="utf-8")
