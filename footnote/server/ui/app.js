// Footnote's chat page. Plain JavaScript, no libraries, no network beyond this server.
//
// Everything goes through the LangGraph server's own API (same origin), with the caller's key
// in an Authorization header, so the page can show only what the server lets this caller see:
// threads are listed, read and continued by their owner only. The key lives in
// sessionStorage: kept for this tab's session, forgotten when the tab closes.
"use strict";

const TOKEN_KEY = "footnote.token";
const PROVIDER_ERRORS = new Set([
  "APIConnectionError", "APITimeoutError", "APIStatusError", "APIError", "RateLimitError",
  "InternalServerError", "ServiceUnavailableError", "AuthenticationError",
  "PermissionDeniedError", "BadRequestError", "NotFoundError", "ModelError",
  "ConnectError", "ConnectTimeout", "ReadTimeout", "TimeoutException", "OverloadedError",
  "OpenAIAPIError", "ModelAPIError",  // langchain-openai's wrappers of the same failures
]);
const INDEX_ERRORS = new Set([
  "IndexError_", "IndexNotFound", "IndexCorrupt", "IndexMismatch", "PostgresUnavailable",
]);

/** Where a thread came from (its `source` metadata): the chat page marks its own threads,
 * MCP `ask` its; a thread made through the LangGraph SDK or RemoteGraph has no mark (the
 * OpenAI-compatible route runs statelessly: its threads are gone once answered). The list
 * shows the chat page's by default; the others only when asked, each marked. */
const CHAT_SOURCE = "chat";
const THREAD_SOURCES = new Map([
  [CHAT_SOURCE, "From the chat page"],
  ["mcp", "From MCP ask"],
]);

const state = {
  config: { graph_id: "footnote", not_covered: "", source_base_url: "" },
  token: sessionStorage.getItem(TOKEN_KEY),
  threadId: null,
  allThreads: false, // list threads from every source, not only the chat page's
  busy: false,
  turns: 0,
  opening: 0,
};

const $ = (id) => document.getElementById(id);

/** An HTTP or network failure, with what a person can do about it. */
class ApiError extends Error {
  constructor(status, detail) {
    super(detail || `HTTP ${status}`);
    this.status = status; // 0: the server could not be reached
    this.detail = detail;
  }
}

/** A run that started but failed on the server (index missing, provider down, ...). */
class RunError extends Error {
  constructor(name, message) {
    super(message || name);
    this.errorName = name || "Error";
  }
}

// ---------------------------------------------------------------- talking to the server

function headers() {
  const h = { "Content-Type": "application/json", Accept: "application/json" };
  if (state.token) h.Authorization = `Bearer ${state.token}`;
  return h;
}

async function request(path, { method = "GET", body } = {}) {
  let response;
  try {
    response = await fetch(path, {
      method,
      headers: headers(),
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store",
    });
  } catch (err) {
    throw new ApiError(0, String(err));
  }
  if (!response.ok) throw new ApiError(response.status, await errorDetail(response));
  return response;
}

async function api(path, options) {
  const response = await request(path, options);
  return response.status === 204 ? null : response.json();
}

async function errorDetail(response) {
  const text = await response.text().catch(() => "");
  try {
    const data = JSON.parse(text);
    return String(data.detail || data.message || data.error || text);
  } catch {
    return text.slice(0, 300);
  }
}

/** Server-sent events from a fetch response: yields {event, data} with data parsed. */
async function* serverSentEvents(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    let chunk;
    try {
      chunk = await reader.read();
    } catch (err) {
      throw new ApiError(0, String(err));
    }
    if (chunk.done) break;
    buffer += chunk.value.replace(/\r\n?/g, "\n");
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      let event = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) event = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (!data.length) continue;
      let parsed;
      try {
        parsed = JSON.parse(data.join("\n"));
      } catch {
        parsed = data.join("\n");
      }
      yield { event, data: parsed };
    }
  }
}

// ---------------------------------------------------------------- messages a person can act on

function describeError(err) {
  if (err instanceof ApiError) {
    if (err.status === 0) {
      return `Cannot reach the Footnote server at ${location.origin}. Check that it is running ` +
        "(footnote serve) and that your connection works, then try again.";
    }
    if (err.status === 401) {
      return "The server did not accept your key (401 Unauthorized). Check that you pasted " +
        "the whole key, or ask your administrator for a new one.";
    }
    if (err.status === 403) return `You are not allowed to do that (403): ${err.detail}`;
    if (err.status === 404) {
      return "That conversation does not exist, or it belongs to someone else.";
    }
    if (err.status === 422) return `The server refused the request (422): ${err.detail}`;
    return `The server answered with an error (${err.status}): ${err.detail}`;
  }
  if (err instanceof RunError) {
    // The server hides internal details from clients; say only what is informative.
    const said = err.message && !/^an internal error occurred\.?$/i.test(err.message.trim())
      && err.message !== err.errorName ? ` ${err.message.trim().replace(/\.?$/, ".")}` : "";
    if (INDEX_ERRORS.has(err.errorName)) {
      return `The document index is not available (${err.errorName}).${said} An ` +
        "administrator needs to build it with footnote ingest, or point the server's " +
        "FOOTNOTE_INDEX at it.";
    }
    if (PROVIDER_ERRORS.has(err.errorName)) {
      return `The language model provider failed, even after retries (${err.errorName}).` +
        `${said} Try again in a moment; if it keeps failing, ask your administrator to ` +
        "check the model settings.";
    }
    return `The answer failed on the server (${err.errorName}).${said}`;
  }
  return `Something went wrong in this page: ${err && err.message ? err.message : err}`;
}

function showAlert(text) {
  $("alert-text").textContent = text;
  $("alert").hidden = false;
}

function clearAlert() {
  $("alert").hidden = true;
  $("alert-text").textContent = "";
}

/** One place for failures: a rejected key goes back to sign-in, the rest is shown. */
function handleError(err) {
  if (err instanceof ApiError && err.status === 401) {
    signOut(describeError(err));
    return;
  }
  showAlert(describeError(err));
}

// ---------------------------------------------------------------- sign-in

/** Can this caller use the API? 200: yes; 401/403: a key is needed or was refused. */
async function probe() {
  await api("/threads/search", { method: "POST", body: { limit: 1 } });
}

function showSignIn(message) {
  $("app").hidden = true;
  $("who").hidden = true;
  $("sign-in").hidden = false;
  $("sign-in-error").textContent = message || "";
  $("api-key").value = "";
  $("api-key").focus();
}

function signOut(message) {
  state.token = null;
  state.threadId = null;
  sessionStorage.removeItem(TOKEN_KEY);
  clearConversation();
  showSignIn(message);
}

/** The header names who the server says the key belongs to (not what the page was told). */
async function showWho() {
  try {
    const me = await api("/feedback/me");
    if (me && typeof me.user === "string" && state.token) {
      $("who-text").textContent = `Signed in as ${me.user}${me.admin ? " (admin)" : ""}`;
    }
  } catch {
    // The header keeps "Signed in": the page works without the name.
  }
}

async function enter() {
  $("sign-in").hidden = true;
  $("app").hidden = false;
  $("who").hidden = false;
  $("who-text").textContent = state.token
    ? "Signed in"
    : "Anonymous: this server does not ask for a key";
  $("sign-out").hidden = !state.token;
  if (state.token) showWho();
  await refreshThreads();
  await openFromLocation();
  $("question").focus();
}

async function onSignIn(event) {
  event.preventDefault();
  const token = $("api-key").value.trim();
  if (!token) return;
  state.token = token;
  try {
    await probe();
  } catch (err) {
    state.token = null;
    if (err instanceof ApiError && (err.status === 401 || err.status === 403)) {
      showSignIn(describeError(err));
    } else {
      showSignIn("");
      showAlert(describeError(err));
    }
    return;
  }
  sessionStorage.setItem(TOKEN_KEY, token);
  clearAlert();
  await enter().catch(handleError);
}

// ---------------------------------------------------------------- threads

function threadTitle(thread) {
  const meta = thread.metadata || {};
  if (typeof meta.title === "string" && meta.title) return meta.title;
  const first = ((thread.values || {}).messages || []).find((m) => m.type === "human");
  if (first) return textOf(first).slice(0, 80);
  return "Untitled conversation";
}

/** The mark of a thread's origin; a value the page does not know reads as "the API". */
function threadSource(thread) {
  const source = (thread.metadata || {}).source;
  return THREAD_SOURCES.get(typeof source === "string" ? source : "") || "From the API";
}

async function refreshThreads() {
  // The server adds the caller's ownership to this filter: it narrows, never widens.
  const filter = state.allThreads ? {} : { metadata: { source: CHAT_SOURCE } };
  const threads = await api("/threads/search", {
    method: "POST",
    body: { limit: 50, sort_by: "updated_at", sort_order: "desc", ...filter },
  });
  const list = $("thread-list");
  list.replaceChildren();
  for (const thread of threads) {
    const item = document.createElement("li");
    const link = document.createElement("a");
    link.href = `#thread=${encodeURIComponent(thread.thread_id)}`;
    link.dataset.threadId = thread.thread_id;
    link.textContent = threadTitle(thread);
    if (thread.thread_id === state.threadId) link.setAttribute("aria-current", "page");
    const when = document.createElement("time");
    when.dateTime = thread.updated_at || thread.created_at || "";
    when.textContent = when.dateTime ? new Date(when.dateTime).toLocaleString() : "";
    item.append(link, when);
    if (state.allThreads) {
      const mark = document.createElement("span");
      mark.className = "thread-source";
      mark.textContent = threadSource(thread);
      item.append(mark);
    }
    item.append(threadControls(item, thread));
    list.append(item);
  }
  $("thread-empty").hidden = threads.length > 0;
}

function smallButton(text, label, onClick, className = "secondary") {
  const button = document.createElement("button");
  button.type = "button";
  button.className = `${className} small`;
  button.textContent = text;
  if (label) button.setAttribute("aria-label", label);
  button.addEventListener("click", onClick);
  return button;
}

/** Rename and Delete for one conversation; both act only after a second step (Save, or
 * "Yes, delete"), and the server decides whose conversation it is. */
function threadControls(item, thread) {
  const title = threadTitle(thread);
  const box = document.createElement("span");
  box.className = "thread-controls";
  const restore = () => box.replaceChildren(rename, remove);
  const rename = smallButton("Rename", `Rename “${title}”`, () => {
    const form = document.createElement("form");
    form.className = "thread-rename";
    const field = document.createElement("input");
    field.type = "text";
    field.maxLength = 200;
    field.value = title;
    field.setAttribute("aria-label", "New name");
    const save = smallButton("Save", null, () => {}, "primary");
    save.type = "submit";
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const name = field.value.trim();
      if (!name) return;
      try {
        await api(`/threads/${encodeURIComponent(thread.thread_id)}`, {
          method: "PATCH", body: { metadata: { title: name } },
        });
        await refreshThreads();
      } catch (err) {
        handleError(err);
      }
    });
    form.append(field, save, smallButton("Cancel", null, restore));
    box.replaceChildren(form);
    field.focus();
    field.select();
  });
  const remove = smallButton("Delete", `Delete “${title}”`, () => {
    const question = document.createElement("span");
    question.className = "confirm-remove";
    question.setAttribute("role", "group");
    question.setAttribute("aria-label", `Delete “${title}”?`);
    const text = document.createElement("span");
    text.textContent = "Delete this conversation? ";
    const yes = smallButton("Yes, delete", null, async () => {
      try {
        await api(`/threads/${encodeURIComponent(thread.thread_id)}`, { method: "DELETE" });
        if (state.threadId === thread.thread_id) {
          clearConversation();
          history.replaceState(null, "", location.pathname);
        }
        await refreshThreads();
      } catch (err) {
        handleError(err);
      }
    }, "danger");
    const keep = smallButton("Keep", null, () => {
      restore();
      remove.focus();
    });
    question.append(text, yes, keep);
    box.replaceChildren(question);
    keep.focus();
  });
  restore();
  return box;
}

function markCurrentThread() {
  for (const link of $("thread-list").querySelectorAll("a")) {
    if (link.dataset.threadId === state.threadId) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
}

function threadFromLocation() {
  const match = /^#thread=([\w-]+)$/.exec(location.hash);
  return match ? match[1] : null;
}

async function openFromLocation() {
  const id = threadFromLocation();
  if (!id) {
    clearConversation();
    return;
  }
  if (id === state.threadId) return;
  await openThread(id);
}

/** Show a stored conversation: its questions, and each answer with the sources it had. */
async function openThread(id) {
  const ticket = ++state.opening; // a later navigation wins over a slower earlier one
  clearConversation();
  clearAlert();
  let history;
  try {
    await api(`/threads/${encodeURIComponent(id)}`);
    history = await api(`/threads/${encodeURIComponent(id)}/history`, {
      method: "POST",
      body: { limit: 200 },
    });
  } catch (err) {
    history = null;
    if (err instanceof ApiError && (err.status === 404 || err.status === 403)) {
      showAlert(describeError(new ApiError(404, err.detail)));
      history = [];
    } else {
      throw err;
    }
  }
  if (ticket !== state.opening) return;
  if (!history || !history.length) {
    state.threadId = null;
    markCurrentThread();
    return;
  }
  state.threadId = id;
  markCurrentThread();
  // A finished run's last checkpoint holds that answer's citations and checks.
  const outcomes = new Map();
  for (const snapshot of history) {
    const values = snapshot.values || {};
    const messages = values.messages || [];
    const last = messages[messages.length - 1];
    if ((snapshot.next || []).length || !last || last.type !== "ai") continue;
    if (!outcomes.has(last.id)) outcomes.set(last.id, values);
  }
  const messages = (history[0].values || {}).messages || [];
  for (const message of messages) {
    if (message.type === "human") addQuestion(textOf(message));
    else if (message.type === "ai" && !(message.tool_calls || []).length && textOf(message)) {
      const turn = addAnswerTurn();
      finishAnswer(turn, { ...(outcomes.get(message.id) || {}), messages: [message] });
    }
  }
}

function clearConversation() {
  state.threadId = null;
  $("log").replaceChildren();
  showSources(null);
  markCurrentThread();
}

function newConversation() {
  if (state.busy) return;
  setDrawerOpen(false);
  history.pushState(null, "", location.pathname);
  clearConversation();
  clearAlert();
  $("question").focus();
}

// ---------------------------------------------------------------- the drawer (phone width)

/** At phone width (app.css) the list is a drawer; on a wider screen the class does nothing.
 * Closing it gives focus back to its button when focus was inside, so it is not lost. */
function setDrawerOpen(open) {
  const toggle = $("threads-toggle");
  const wasOpen = toggle.getAttribute("aria-expanded") === "true";
  if (open === wasOpen) return;
  $("app").classList.toggle("drawer-open", open);
  toggle.setAttribute("aria-expanded", String(open));
  if (open) $("threads-close").focus();
  else if ($("threads").contains(document.activeElement)) toggle.focus();
}

function wireDrawer() {
  $("threads-toggle").addEventListener("click", () => {
    setDrawerOpen($("threads-toggle").getAttribute("aria-expanded") !== "true");
  });
  $("threads-close").addEventListener("click", () => setDrawerOpen(false));
  $("thread-list").addEventListener("click", (event) => {
    if (event.target.closest("a")) setDrawerOpen(false); // a conversation was chosen
  });
  $("app").addEventListener("click", (event) => {
    if (event.target === $("app")) setDrawerOpen(false); // the dimmed page behind it
  });
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && $("app").classList.contains("drawer-open")) {
      setDrawerOpen(false);
      $("threads-toggle").focus();
    }
  });
  $("threads-all").addEventListener("change", () => {
    state.allThreads = $("threads-all").checked;
    refreshThreads().catch(handleError);
  });
}

// ---------------------------------------------------------------- asking

function textOf(message) {
  const content = message.content;
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    return content.map((part) => (typeof part === "string" ? part : part.text || "")).join("");
  }
  return "";
}

function addQuestion(text) {
  const item = document.createElement("li");
  item.className = "turn question";
  const label = document.createElement("h3");
  label.className = "visually-hidden";
  label.textContent = "You asked";
  const body = document.createElement("p");
  body.textContent = text;
  item.append(label, body);
  $("log").append(item);
  return item;
}

function addAnswerTurn() {
  state.turns += 1;
  const item = document.createElement("li");
  item.className = "turn answer";
  item.dataset.turn = String(state.turns);
  const label = document.createElement("h3");
  label.className = "visually-hidden";
  label.textContent = "Footnote answered";
  const progress = document.createElement("ol");
  progress.className = "progress";
  progress.setAttribute("role", "status");
  progress.setAttribute("aria-label", "Progress");
  const body = document.createElement("div");
  body.className = "answer-text";
  const notes = document.createElement("div");
  notes.className = "checks";
  item.append(label, progress, body, notes);
  $("log").append(item);
  return item;
}

function progressText(event) {
  switch (event.event) {
    case "rewriting":
      return `Searching for “${event.query}”` +
        (event.attempt > 1 ? ` (attempt ${event.attempt})` : "");
    case "retrieved":
      return `Retrieved ${event.candidates} passages`;
    case "graded":
      return `Graded: ${event.relevant} of ${event.candidates} relevant`;
    case "web_search":
      return `Searching the web for “${event.query}”`;
    case "answer":
      return "Writing the answer";
    default:
      return null;
  }
}

function addProgress(turn, event) {
  const text = progressText(event);
  if (!text) return;
  const step = document.createElement("li");
  step.textContent = text;
  turn.querySelector(".progress").append(step);
}

function setStreamingText(turn, text) {
  const body = turn.querySelector(".answer-text");
  body.classList.add("streaming");
  body.textContent = text;
  scrollToEnd();
}

async function ask(question) {
  setBusy(true);
  clearAlert();
  let turn = null;
  try {
    if (!state.threadId) {
      const thread = await api("/threads", {
        method: "POST",
        body: { metadata: { title: question.slice(0, 80), source: CHAT_SOURCE } },
      });
      state.threadId = thread.thread_id;
      history.pushState(null, "", `#thread=${encodeURIComponent(thread.thread_id)}`);
    }
    addQuestion(question);
    turn = addAnswerTurn();
    turn.setAttribute("aria-busy", "true");
    const final = await streamRun(state.threadId, question, turn);
    finishAnswer(turn, final);
    await refreshThreads().catch(() => {});
  } catch (err) {
    if (turn) {
      turn.classList.add("failed");
      turn.querySelector(".answer-text").textContent = "No answer: see the message above.";
    }
    handleError(err);
  } finally {
    if (turn) turn.removeAttribute("aria-busy");
    setBusy(false);
  }
}

/** One run, streamed: progress events, answer tokens as they come, the final state last. */
async function streamRun(threadId, question, turn) {
  const response = await request(`/threads/${encodeURIComponent(threadId)}/runs/stream`, {
    method: "POST",
    body: {
      assistant_id: state.config.graph_id,
      input: { messages: [{ role: "user", content: question }] },
      stream_mode: ["custom", "messages-tuple", "values"],
      on_disconnect: "cancel",
    },
  });
  let streamed = "";
  let final = null;
  for await (const { event, data } of serverSentEvents(response)) {
    if (event === "custom" && data && typeof data === "object") {
      addProgress(turn, data);
      if (data.event === "answer" && typeof data.text === "string") {
        streamed = data.text;
        setStreamingText(turn, streamed);
      }
    } else if (event === "messages" && Array.isArray(data)) {
      const [chunk, meta] = data;
      if (!meta || meta.langgraph_node !== "generate" || !chunk) continue;
      const piece = textOf(chunk);
      if (!piece) continue;
      streamed = chunk.type === "AIMessageChunk" ? streamed + piece : piece;
      setStreamingText(turn, streamed);
    } else if (event === "values") {
      final = data;
    } else if (event === "error") {
      const info = data && typeof data === "object" ? data : { message: String(data) };
      throw new RunError(info.error, info.message);
    }
  }
  if (!final) throw new RunError("IncompleteRun", "The run ended without an answer.");
  return final;
}

// ---------------------------------------------------------------- showing an answer

function isNotCovered(text, citations) {
  const phrase = state.config.not_covered;
  return !citations.length && Boolean(phrase) && text.includes(phrase);
}

/** Render the final answer: citation links, "not covered", and what the checks found. */
function finishAnswer(turn, values) {
  const messages = values.messages || [];
  const answer = messages[messages.length - 1];
  const text = answer ? textOf(answer) : "";
  const citations = Array.isArray(values.citations) ? values.citations : [];
  const body = turn.querySelector(".answer-text");
  body.classList.remove("streaming");
  body.replaceChildren();
  turn.citations = citations;
  if (isNotCovered(text, citations)) {
    turn.classList.add("not-covered");
    const badge = document.createElement("p");
    badge.className = "badge";
    badge.textContent = "Not covered by your documents";
    body.append(badge);
  }
  body.append(renderMarkdown(text, {
    cite: (n) => citationLink(turn, n),
    allowedHref: (href) => citedHref(turn, href),
  }));
  renderChecks(turn, values);
  if (typeof renderParts === "function") renderParts(turn, values);
  if (citations.length) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "show-sources";
    button.textContent = `Show the ${citations.length} source${citations.length > 1 ? "s" : ""}`;
    button.addEventListener("click", () => {
      showSources(turn);
      $("sources-title").focus();
    });
    turn.querySelector(".checks").prepend(button);
  }
  showSources(turn);
  scrollToEnd();
  // feedback.js adds rating and "why" to each finished answer.
  turn.dispatchEvent(new CustomEvent("footnote:answer", {
    bubbles: true, detail: { threadId: state.threadId, values },
  }));
}

/** The link for citation [n] of this answer, or null when the answer has no source n. */
function citationLink(turn, n) {
  const known = new Set((turn.citations || []).map((c) => Number(c.n)));
  if (!known.has(n)) return null;
  const link = document.createElement("a");
  link.className = "cite";
  link.href = `#source-${turn.dataset.turn}-${n}`;
  link.textContent = `[${n}]`;
  link.setAttribute("aria-label", `Source ${n}: show the cited passage`);
  link.addEventListener("click", (event) => {
    event.preventDefault();
    showPassage(turn, n);
  });
  return link;
}

/** A Markdown link's address when it is one of this answer's cited sources, else null: an
 * answer links nowhere its sources do not. */
function citedHref(turn, href) {
  const cited = new Set((turn.citations || []).map(sourceHref).filter(Boolean));
  let url;
  try {
    url = new URL(href);
  } catch {
    return null;
  }
  return cited.has(url.href) ? url.href : null;
}

function claimText(claim) {
  if (typeof claim === "string") return claim;
  if (claim && typeof claim === "object") {
    const text = claim.sentence || claim.claim || claim.text || JSON.stringify(claim);
    const cited = Array.isArray(claim.citations) && claim.citations.length
      ? ` (cited ${claim.citations.map((n) => `[${n}]`).join("")})`
      : "";
    return text + cited;
  }
  return String(claim);
}

function renderChecks(turn, values) {
  const box = turn.querySelector(".checks");
  box.replaceChildren();
  const invalid = Array.isArray(values.footnote_invalid_citations) ? values.footnote_invalid_citations : [];
  const unsupported = Array.isArray(values.footnote_unsupported_claims) ? values.footnote_unsupported_claims : [];
  const notices = Array.isArray(values.footnote_notices) ? values.footnote_notices : [];
  if (invalid.length) {
    const p = document.createElement("p");
    p.className = "warning invalid-citations";
    p.textContent = "Citations removed because they named no source: " +
      invalid.map((n) => `[${n}]`).join(", ");
    box.append(p);
  }
  if (unsupported.length) {
    const heading = document.createElement("p");
    heading.className = "warning unsupported-claims";
    heading.textContent = "Claims the cited sources do not support:";
    const list = document.createElement("ul");
    list.className = "unsupported-claims";
    for (const claim of unsupported) {
      const item = document.createElement("li");
      item.textContent = claimText(claim);
      list.append(item);
    }
    box.append(heading, list);
  }
  for (const notice of notices) {
    const p = document.createElement("p");
    p.className = "notice";
    p.textContent = `Note: ${notice}`;
    box.append(p);
  }
}

// ---------------------------------------------------------------- sources panel

function sourceLocation(citation) {
  const parts = [];
  if (citation.section) parts.push(`§ ${citation.section}`);
  if (citation.page !== undefined && citation.page !== null) parts.push(`page ${citation.page}`);
  if (Array.isArray(citation.lines) && citation.lines.length === 2) {
    parts.push(`lines ${citation.lines[0]}–${citation.lines[1]}`);
  }
  return parts.join(", ");
}

/** A safe link for a source: a web result's own http(s) URL, or a document's relative URL
 * under the operator's base. A document's URL is its stored path, so one that reads as an
 * absolute URL (a folder named `https:`) is not a link. */
function sourceHref(citation) {
  if (!citation.url || typeof citation.url !== "string") return null;
  const web = citation.kind === "web";
  const base = web ? undefined : state.config.source_base_url || undefined;
  if (!web && !base) return null;
  let url;
  try {
    url = new URL(citation.url, base);
  } catch {
    return null;
  }
  if (url.protocol !== "https:" && url.protocol !== "http:") return null;
  if (!web && (/^[a-z][a-z0-9+.-]*:|^[\\/]{2}/i.test(citation.url) || !url.href.startsWith(base))) {
    return null;
  }
  return url.href;
}

function showSources(turn) {
  const list = $("source-list");
  list.replaceChildren();
  const citations = turn ? turn.citations || [] : [];
  $("sources-empty").hidden = citations.length > 0;
  for (const old of document.querySelectorAll(".turn.selected")) old.classList.remove("selected");
  if (!turn) return;
  turn.classList.add("selected");
  for (const citation of citations) {
    const id = `source-${turn.dataset.turn}-${citation.n}`;
    const item = document.createElement("li");
    item.className = "source";
    item.id = id;
    const title = document.createElement("h3");
    const number = document.createElement("span");
    number.className = "num";
    number.textContent = `[${citation.n}] `;
    title.append(number, document.createTextNode(citation.source || citation.url || "source"));
    const where = document.createElement("p");
    where.className = "where";
    where.textContent = sourceLocation(citation);
    item.append(title, where);
    const href = sourceHref(citation);
    if (href) {
      const link = document.createElement("a");
      link.href = href;
      link.rel = "noopener noreferrer";
      link.target = "_blank";
      link.className = "open-source";
      link.textContent = citation.kind === "web" ? "Open the web page" : "Open the document";
      item.append(link);
    } else if (citation.url && citation.url !== citation.source) {
      const ref = document.createElement("p");
      ref.className = "where";
      ref.textContent = citation.url;
      item.append(ref);
    }
    const toggle = document.createElement("button");
    toggle.type = "button";
    toggle.className = "toggle-passage";
    toggle.textContent = "Show the passage";
    toggle.setAttribute("aria-expanded", "false");
    toggle.setAttribute("aria-controls", `${id}-passage`);
    const passage = document.createElement("blockquote");
    passage.id = `${id}-passage`;
    passage.className = "passage";
    passage.tabIndex = -1;
    passage.hidden = true;
    renderPassage(passage, typeof citation.text === "string" ? citation.text : "");
    toggle.addEventListener("click", () => setPassageOpen(item, passage.hidden));
    item.append(toggle, passage);
    list.append(item);
  }
}

/** Prose reflows to the panel's width; code and indented blocks keep their lines. */
function renderPassage(box, text) {
  if (!text.trim()) {
    box.textContent = "(the server sent no passage text)";
    return;
  }
  for (const block of text.split(/\n\s*\n/)) {
    if (!block.trim()) continue;
    const verbatim = block.includes("```") || /^(?: {2,}|\t)/m.test(block);
    const element = document.createElement(verbatim ? "pre" : "p");
    element.textContent = verbatim ? block : block.replace(/\s*\n\s*/g, " ");
    box.append(element);
  }
}

function setPassageOpen(item, open) {
  const toggle = item.querySelector(".toggle-passage");
  const passage = item.querySelector(".passage");
  passage.hidden = !open;
  toggle.setAttribute("aria-expanded", String(open));
  toggle.textContent = open ? "Hide the passage" : "Show the passage";
}

function showPassage(turn, n) {
  showSources(turn);
  const item = $(`source-${turn.dataset.turn}-${n}`);
  if (!item) return;
  for (const other of document.querySelectorAll(".source.active")) other.classList.remove("active");
  item.classList.add("active");
  setPassageOpen(item, true);
  item.scrollIntoView({ block: "nearest" });
  item.querySelector(".passage").focus();
}

// ---------------------------------------------------------------- page plumbing

function setBusy(busy) {
  state.busy = busy;
  $("send").disabled = busy;
  $("new-thread").disabled = busy;
  $("send").textContent = busy ? "Answering…" : "Ask";
}

function scrollToEnd() {
  const log = $("log");
  const last = log.lastElementChild;
  if (last) last.scrollIntoView({ block: "end" });
}

async function loadConfig() {
  const config = await api("/ui/config.json");
  Object.assign(state.config, config);
}

async function start() {
  $("alert-close").addEventListener("click", clearAlert);
  $("sign-in-form").addEventListener("submit", onSignIn);
  $("sign-out").addEventListener("click", () => signOut(""));
  $("new-thread").addEventListener("click", newConversation);
  wireDrawer();
  $("ask-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const question = $("question").value.trim();
    if (!question || state.busy) return;
    $("question").value = "";
    ask(question);
  });
  $("question").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      $("ask-form").requestSubmit();
    }
  });
  window.addEventListener("hashchange", () => {
    if (!state.busy && !$("app").hidden) openFromLocation().catch(handleError);
  });
  try {
    await loadConfig();
    await probe();
  } catch (err) {
    if (err instanceof ApiError && (err.status === 401 || err.status === 403)) {
      if (state.token) signOut(describeError(err));
      else showSignIn("");
      return;
    }
    showAlert(describeError(err));
    return;
  }
  await enter().catch(handleError);
}

document.addEventListener("DOMContentLoaded", () => {
  start().catch(handleError);
});
