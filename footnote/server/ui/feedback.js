// Feedback on answers, "why this answer", and the admin Review view.
//
// Loaded after app.js and uses its request helpers (api, handleError, state). It listens for
// the "footnote:answer" event app.js sends when an answer is shown, and adds: thumbs up/down,
// a comment, "this citation is wrong" per citation, and a "Why this answer?" panel. Admins
// also get a Review button. Everything a user or a document wrote is set with textContent:
// nothing here is ever parsed as HTML.
"use strict";

const feedback = {
  me: null,            // {user, admin} once known
  setup: null,         // the Review button's set-up, once per sign-in
  live: false,         // the next answer turn comes from a question just asked
  byThread: new Map(), // thread id -> Promise of Map(message id -> feedback row)
};

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

async function whoAmI() {
  if (!feedback.me) feedback.me = await api("/feedback/me");
  return feedback.me;
}

function threadFeedback(threadId) {
  if (!feedback.byThread.has(threadId)) {
    const loaded = api(`/feedback?thread_id=${encodeURIComponent(threadId)}&limit=500`)
      .then((data) => new Map(data.items.map((row) => [row.message_id, row])))
      .catch(() => new Map());
    feedback.byThread.set(threadId, loaded);
  }
  return feedback.byThread.get(threadId);
}

// ---------------------------------------------------------------- rating an answer

function addFeedbackBar(turn, threadId, values) {
  const messages = values.messages || [];
  const answer = messages[messages.length - 1];
  if (!threadId || !answer || !answer.id) return;
  turn.querySelector(".feedback-bar")?.remove();
  const citations = Array.isArray(values.citations) ? values.citations : [];
  const bar = el("div", "feedback-bar");
  bar.setAttribute("role", "group");
  bar.setAttribute("aria-label", "Rate this answer");
  const current = { rating: null, comment: "", wrong: new Set() };

  const up = el("button", "rate up", "↑ Helpful");
  const down = el("button", "rate down", "↓ Not helpful");
  for (const button of [up, down]) {
    button.type = "button";
    button.setAttribute("aria-pressed", "false");
  }
  up.setAttribute("aria-label", "Rate this answer helpful");
  down.setAttribute("aria-label", "Rate this answer not helpful");
  const status = el("span", "feedback-status");
  status.setAttribute("role", "status");

  const flags = el("div", "flags");
  const flagButtons = new Map();
  if (citations.length) {
    flags.append(el("span", "flags-label", "Citation wrong?"));
    for (const citation of citations) {
      const n = Number(citation.n);
      const flag = el("button", "flag", `[${n}] is wrong`);
      flag.type = "button";
      flag.dataset.n = String(n);
      flag.setAttribute("aria-pressed", "false");
      flag.setAttribute("aria-label", `Citation ${n} does not support what it is cited for`);
      flag.addEventListener("click", () => {
        if (current.wrong.has(n)) current.wrong.delete(n);
        else current.wrong.add(n);
        save();
      });
      flagButtons.set(n, flag);
      flags.append(flag);
    }
  }

  const commentId = `comment-${turn.dataset.turn}`;
  const commentLabel = el("label", "visually-hidden", "Comment on this answer");
  commentLabel.htmlFor = commentId;
  const comment = el("textarea", "feedback-comment");
  comment.id = commentId;
  comment.rows = 1;
  comment.maxLength = 2000;
  comment.placeholder = "Comment (optional)";
  const send = el("button", "send-comment", "Save comment");
  send.type = "button";

  const whyButton = el("button", "why-button", "Why this answer?");
  whyButton.type = "button";
  whyButton.setAttribute("aria-expanded", "false");
  const panel = el("section", "why-panel");
  panel.hidden = true;
  panel.id = `why-${turn.dataset.turn}`;
  whyButton.setAttribute("aria-controls", panel.id);
  whyButton.addEventListener("click", async () => {
    if (!panel.hidden) {
      panel.hidden = true;
      whyButton.setAttribute("aria-expanded", "false");
      return;
    }
    try {
      const data = await api(
        `/feedback/why?thread_id=${encodeURIComponent(threadId)}` +
        `&message_id=${encodeURIComponent(answer.id)}`,
      );
      renderWhy(panel, data);
      panel.hidden = false;
      whyButton.setAttribute("aria-expanded", "true");
    } catch (err) {
      handleError(err);
    }
  });

  function show() {
    up.setAttribute("aria-pressed", String(current.rating === 1));
    down.setAttribute("aria-pressed", String(current.rating === -1));
    for (const [n, button] of flagButtons) {
      button.setAttribute("aria-pressed", String(current.wrong.has(n)));
    }
  }

  async function save() {
    show();
    status.textContent = "Saving…";
    try {
      const row = await api("/feedback", {
        method: "POST",
        body: {
          thread_id: threadId,
          message_id: answer.id,
          rating: current.rating,
          comment: current.comment,
          wrong_citations: [...current.wrong].sort((a, b) => a - b),
        },
      });
      (await threadFeedback(threadId)).set(answer.id, row);
      status.textContent = "Thank you: feedback saved.";
    } catch (err) {
      status.textContent = "";
      handleError(err);
    }
  }

  up.addEventListener("click", () => { current.rating = current.rating === 1 ? null : 1; save(); });
  down.addEventListener("click", () => {
    current.rating = current.rating === -1 ? null : -1;
    save();
  });
  send.addEventListener("click", () => { current.comment = comment.value.trim(); save(); });

  bar.append(up, down, flags, commentLabel, comment, send, whyButton, status);
  turn.append(bar, panel);

  threadFeedback(threadId).then((known) => {
    const row = known.get(answer.id);
    if (row) {
      current.rating = row.rating;
      current.comment = row.comment || "";
      current.wrong = new Set(row.wrong_citations || []);
      comment.value = current.comment;
      show();
    } else if ((turn.classList.contains("not-covered") || turn.classList.contains("partly-covered"))
               && turn.dataset.live === "true") {
      // Recorded unrated, so an admin can review what the documents do not cover (a part
      // of a question in several parts included).
      api("/feedback", {
        method: "POST",
        body: { thread_id: threadId, message_id: answer.id },
      }).catch(() => {});
    }
  });
}

// ---------------------------------------------------------------- why this answer

const SEARCH_STRATEGIES = {
  as_asked: "searched for the question as asked",
  condensed: "made the follow-up a question of its own",
  split: "searched for one part of the question",
  hyde: "also searched with a sketched answer",
  hop: "searched again for what was missing",
};

/** The entities a multi-hop answer went through (`footnote_hops`), in words. */
function describeHops(hops) {
  return (Array.isArray(hops) ? hops : [])
    .filter((h) => h && Array.isArray(h.entities) && h.entities.length)
    .map((h) => `${h.entities.join(", ")}` +
      ((h.sources || []).length ? ` → ${h.sources.join(", ")}` : ""))
    .join("; ");
}

/** A step of the graph's path (`grade_documents:2/8`) in words ("kept 2 of 8 passages"). */
function describeStep(step) {
  const [name, ...rest] = step.split(":");
  const detail = rest.join(":");
  switch (name) {
    case "new_question": return "read the question";
    case "plan_turn": {
      const [turn, count] = detail.split(":");
      if (turn === "global") return "a question about all the documents";
      if (turn !== "search") return "no search needed";
      const n = Number(count) || 1;
      return n > 1 ? `planned ${n} parts` : "planned one search";
    }
    case "rewrite_query": return SEARCH_STRATEGIES[detail] || `rewrote the search (${detail})`;
    case "call_retriever": return "searched the documents";
    case "plan_hop":
      if (detail === "search") return "planned another search";
      if (detail === "graph") return "followed the entity graph";
      if (detail === "budget") return "stopped: no searches left";
      return "had enough passages";
    case "grade_documents": {
      const [kept, of] = detail.split("/");
      return `kept ${kept} of ${of} passages`;
    }
    case "web_search":
      if (detail === "off") return "web search is off";
      if (detail === "failed") return "web search failed";
      return `found ${detail} web pages`;
    case "reply": return "replied without a search";
    case "global_answer": return `summarised ${Number(detail) || 0} communities of related documents`;
    case "generate": return "wrote the answer";
    case "verify_citations": return "checked every citation";
    default: return step.replace(/[_:]/g, " ");
  }
}

function renderWhy(panel, data) {
  const why = data.why || {};
  panel.replaceChildren();
  panel.append(el("h4", null, "How this answer was made"));
  if (data.recorded) {
    panel.append(el("p", "hint", "As recorded when it was rated (this is another user's answer)."));
  }
  const facts = el("dl", "why-facts");
  const fact = (term, value) => {
    if (!value) return;
    facts.append(el("dt", null, term), el("dd", null, value));
  };
  fact("Question", why.question || data.question);
  if (why.standalone_question && why.standalone_question !== why.question) {
    fact("Searched as", why.standalone_question);
  }
  const path = Array.isArray(why.path) ? why.path.map(String) : [];
  fact("Steps", path.map(describeStep).join(" → "));
  if (path.length) facts.lastElementChild.title = path.join(" → "); // the graph's own names
  if (typeof why.searches === "number") fact("Searches", String(why.searches));
  fact("Went through", describeHops(why.hops));
  panel.append(facts);

  // Rounds of an agentic turn name their part; older runs' rounds have none.
  const research = new Map((why.research || []).map((r) => [r.part, r]));
  const covered = new Map((why.parts || []).map((p, i) => [i, p]));
  let shownPart;
  let count = 0;
  (why.rounds || []).forEach((round) => {
    if (round.part !== undefined && round.part !== shownPart) {
      shownPart = round.part;
      count = 0;
      const spent = research.get(round.part);
      const part = covered.get(round.part);
      let title = `Part ${round.part + 1}: “${round.part_question}”`;
      if (part && typeof part.covered === "boolean") title += part.covered ? " — covered" : " — not covered";
      if (spent) title += ` (${spent.searches} search${spent.searches === 1 ? "" : "es"}, ${spent.kept} kept)`;
      panel.append(el("h5", "why-part", title));
    }
    count += 1;
    const box = el("div", "why-round");
    box.append(el("h5", null, `Search ${count}: “${round.query}”` +
      (round.strategy ? ` (${round.strategy})` : "")));
    if (Array.isArray(round.entities) && round.entities.length) {
      box.append(el("p", "why-entities", `Through the entity graph: ${round.entities.join(", ")}`));
    }
    if (typeof round.threshold === "number") {
      box.append(el("p", "hint", `Graded ${round.method || ""}; kept at ${round.threshold.toFixed(2)} or above, ` +
        `at most ${round.keep_k}.`));
    }
    const table = el("table", "why-candidates");
    const scroll = el("div", "why-scroll"); // a wide table scrolls inside the panel
    const head = el("tr");
    for (const h of ["Passage", "Similarity", "Keywords", "Grade", "Outcome"]) head.append(el("th", null, h));
    table.append(head);
    for (const c of round.candidates || []) {
      const row = el("tr", c.kept ? "kept" : "dropped");
      const evidence = c.evidence || {};
      const number = (v) => (typeof v === "number" ? v.toFixed(2) : "–");
      const dropped = c.reason ? `dropped (${c.reason})` : "dropped (graded below the threshold or beyond keep_k)";
      row.append(
        el("td", null, c.section ? `${c.source} § ${c.section}` : c.source || c.chunk_id),
        el("td", null, number(evidence.dense)),
        el("td", null, number(evidence.coverage)),
        el("td", null, number(c.grade)),
        el("td", null, c.kept ? "kept" : dropped),
      );
      table.append(row);
    }
    scroll.append(table);
    box.append(scroll);
    panel.append(box);
  });
  if (!(why.rounds || []).length && !(why.communities || []).length) {
    panel.append(el("p", "hint", "No search was recorded."));
  }

  const list = (title, items, text) => {
    if (!Array.isArray(items) || !items.length) return;
    panel.append(el("h5", null, title));
    const ul = el("ul");
    for (const item of items) ul.append(el("li", null, text(item)));
    panel.append(ul);
  };
  list("Notices", why.notices, String);
  list("Removed citations (named no source)", why.invalid_citations, (n) => `[${n}]`);
  list("Removed claims (not supported by their sources)", why.unsupported_claims, claimText);
  list("Cited", why.citations, (c) => `[${c.n}] ${c.source || ""}${c.section ? ` § ${c.section}` : ""}`);
  list("Communities (groups of related documents the answer went through)", why.communities,
    (c) => `${(c.entities || []).slice(0, 5).join(", ") || `community ${c.id}`}` +
      ((c.documents || []).length ? `: cited ${c.documents.join(", ")}` : ": nothing cited"));
  list("Parts", why.parts, (p) => `${p.question}: ${p.covered ? "covered" : "not covered"}` +
    ((p.citations || []).length ? `, cites ${p.citations.map((n) => `[${n}]`).join("")}` : ""));
  if (why.searches !== undefined && typeof why.searches !== "number") {  // older graphs' list
    panel.append(el("h5", null, "Searches"));
    panel.append(el("pre", "why-raw", JSON.stringify(why.searches, null, 2)));
  }
}

// ---------------------------------------------------------------- admin review

const REVIEW_FILTERS = [
  ["review", "Rated down or not covered"],
  ["down", "Rated down"],
  ["not_covered", "Not covered"],
  ["all", "All feedback"],
];

function buildReview() {
  const section = el("section", "review");
  section.id = "review";
  section.hidden = true;
  section.setAttribute("aria-labelledby", "review-title");
  const title = el("h2", null, "Review");
  title.id = "review-title";
  title.tabIndex = -1;
  const form = el("form", "review-filters");
  const showLabel = el("label", null, "Show ");
  const show = el("select");
  show.id = "review-show";
  for (const [value, text] of REVIEW_FILTERS) {
    const option = el("option", null, text);
    option.value = value;
    show.append(option);
  }
  showLabel.append(show);
  const userLabel = el("label", null, "User ");
  const user = el("input");
  user.id = "review-user";
  user.maxLength = 200;
  userLabel.append(user);
  const refresh = el("button", null, "Apply");
  refresh.type = "submit";
  const back = el("button", "back", "Back to the chat");
  back.type = "button";
  form.append(showLabel, userLabel, refresh);
  const items = el("ol", "review-items");
  items.id = "review-items";
  const empty = el("p", "empty", "Nothing to review.");
  empty.id = "review-empty";
  empty.hidden = true;
  section.append(title, back, form, items, empty);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    loadReview().catch(handleError);
  });
  back.addEventListener("click", () => setReviewOpen(false));
  $("app").after(section);
}

function setReviewOpen(open) {
  $("review").hidden = !open;
  $("app").hidden = open;
  $("review-toggle").setAttribute("aria-pressed", String(open));
  if (open) {
    loadReview().catch(handleError);
    $("review-title").focus();
  }
}

async function loadReview() {
  const choice = $("review-show").value;
  const params = new URLSearchParams({ limit: "200" });
  if (choice === "review") params.set("scope", "review");
  else {
    params.set("scope", "all");
    if (choice === "down") params.set("rating", "down");
    if (choice === "not_covered") params.set("not_covered", "1");
  }
  const user = $("review-user").value.trim();
  if (user) params.set("user", user);
  const data = await api(`/feedback?${params}`);
  const list = $("review-items");
  list.replaceChildren(...data.items.map(reviewItem));
  $("review-empty").hidden = data.items.length > 0;
}

function reviewItem(row) {
  const item = el("li", "review-item");
  item.dataset.id = String(row.id);
  const verdict = row.rating === 1 ? "rated up" : row.rating === -1 ? "rated down" : "not rated";
  // A question in several parts answered in some: name the parts that were not covered.
  const parts = (row.citations || []).length ? row.uncovered_parts || [] : [];
  const uncovered = parts.length ? ` · not covered: ${parts.join("; ")}` : " · not covered";
  const meta = el("p", "review-meta",
    `${row.created_at.slice(0, 16).replace("T", " ")} · ${row.user_id} · ${verdict}` +
    (row.not_covered ? uncovered : ""));
  item.append(meta, el("p", "review-question", row.question));
  item.append(el("p", "review-answer", row.answer.length > 400
    ? `${row.answer.slice(0, 400)}…` : row.answer));
  if (row.comment) item.append(el("p", "review-comment", `Comment: ${row.comment}`));
  if ((row.wrong_citations || []).length) {
    const named = row.wrong_citations.map((n) => {
      const c = (row.citations || []).find((x) => x.n === n) || {};
      return `[${n}] ${c.chunk_id || ""}`;
    });
    item.append(el("p", "review-flags", `Citations flagged wrong: ${named.join(", ")}`));
  }
  const actions = el("div", "review-actions");
  const whyButton = el("button", "why-button", "Why this answer?");
  whyButton.type = "button";
  const panel = el("section", "why-panel");
  panel.hidden = true;
  whyButton.addEventListener("click", async () => {
    if (!panel.hidden) { panel.hidden = true; return; }
    try {
      const data = await api(`/feedback/why?thread_id=${encodeURIComponent(row.thread_id)}` +
        `&message_id=${encodeURIComponent(row.message_id)}`);
      renderWhy(panel, data);
      panel.hidden = false;
    } catch (err) {
      handleError(err);
    }
  });
  actions.append(whyButton);
  if (row.not_covered) {
    const gap = el("button", "should-cover",
      row.should_cover ? "Marked: should be covered" : "Should be covered");
    gap.type = "button";
    gap.setAttribute("aria-pressed", String(Boolean(row.should_cover)));
    gap.addEventListener("click", async () => {
      try {
        const updated = await api(`/feedback/${row.id}`, {
          method: "PATCH",
          body: { should_cover: !row.should_cover },
        });
        item.replaceWith(reviewItem(updated));
      } catch (err) {
        handleError(err);
      }
    });
    actions.append(gap);
  }
  item.append(actions, panel);
  return item;
}

async function setUpReview() {
  let me;
  try {
    me = await whoAmI();
  } catch {
    feedback.me = null;
    return; // not signed in yet: tried again on the next answer or sign-in
  }
  if (!me.admin || $("review-toggle")) return;
  buildReview();
  const toggle = el("button", "review-toggle", "Review");
  toggle.id = "review-toggle";
  toggle.type = "button";
  toggle.setAttribute("aria-pressed", "false");
  toggle.addEventListener("click", () => setReviewOpen($("review").hidden));
  $("who").append(toggle);
}

// ---------------------------------------------------------------- wiring

document.addEventListener("footnote:answer", (event) => {
  const { threadId, values } = event.detail || {};
  addFeedbackBar(event.target, threadId, values || {});
});
// A live run's answer (not one re-read from history) may be recorded for review.
document.addEventListener("submit", (event) => {
  if (event.target.id === "ask-form") feedback.live = true;
}, true);
new MutationObserver(() => {
  if (!$("sign-in").hidden) { // signed out: forget who it was
    feedback.me = null;
    feedback.setup = null;
    feedback.byThread.clear();
    $("review-toggle")?.remove();
    $("review")?.remove();
  } else if (!$("who").hidden && !feedback.setup) {
    feedback.setup = setUpReview();
  }
  if (feedback.live) {
    const busy = document.querySelector(".turn.answer[aria-busy='true']");
    if (busy) {
      busy.dataset.live = "true";
      feedback.live = false;
    }
  }
}).observe(document.body, { subtree: true, attributes: true, childList: true,
  attributeFilter: ["hidden", "aria-busy"] });
