// The Sources view: the documents in the index. Every signed-in user sees the documents
// they may read (the `library` graph); an admin also uploads files with access groups, adds
// a URL, removes a document and starts a sync, full or of permissions only (the `indexer`
// graph, which the server opens to admins only), with progress and each failure's reason.
// Uses app.js's helpers (request, api, serverSentEvents, describeError, $), loaded before
// this file.
"use strict";

const library = { admin: false, busy: false };

function libraryStatus(text) {
  $("library-status").textContent = text;
}

/** Run a corpus graph without a thread; `onProgress` gets the indexer's progress events. */
async function corpusRun(graph, input, onProgress) {
  const response = await request("/runs/stream", {
    method: "POST",
    body: { assistant_id: graph, input, stream_mode: ["custom", "values"] },
  });
  let final = null;
  for await (const { event, data } of serverSentEvents(response)) {
    if (event === "custom" && data && onProgress) onProgress(data);
    else if (event === "values") final = data;
    else if (event === "error") {
      const info = data && typeof data === "object" ? data : { message: String(data) };
      throw new RunError(info.error, info.message);
    }
  }
  if (!final) throw new RunError("IncompleteRun", "The run ended without a result.");
  return final;
}

const LIBRARY_COLUMNS = ["Document", "Chunks", "Access", "Last ingested", "Notes", "Remove"];

function cell(row, text) {
  const td = document.createElement("td");
  td.textContent = text;
  // At phone width each row is a card; the label says what the value is (app.css).
  td.dataset.label = LIBRARY_COLUMNS[row.children.length] || "";
  row.append(td);
  return td;
}

/** "Remove" asks first: the row's button becomes a question with Remove / Keep. */
function removeControl(td, source) {
  const ask = document.createElement("button");
  ask.type = "button";
  ask.className = "secondary";
  ask.textContent = "Remove";
  ask.setAttribute("aria-label", `Remove ${source}`);
  ask.addEventListener("click", () => {
    const question = document.createElement("span");
    question.className = "confirm-remove";
    question.setAttribute("role", "group");
    question.setAttribute("aria-label", `Remove ${source}?`);
    const text = document.createElement("span");
    text.textContent = `Remove ${source} from the index? `;
    const yes = document.createElement("button");
    yes.type = "button";
    yes.className = "danger";
    yes.textContent = "Yes, remove";
    yes.addEventListener("click", () => manage({ action: "remove", sources: [source] }));
    const keep = document.createElement("button");
    keep.type = "button";
    keep.className = "secondary";
    keep.textContent = "Keep";
    keep.addEventListener("click", () => {
      td.replaceChildren(ask);
      ask.focus();
    });
    question.append(text, yes, keep);
    td.replaceChildren(question);
    keep.focus();
  });
  td.replaceChildren(ask);
}

function renderDocuments(documents, failures) {
  const body = $("library-rows");
  body.replaceChildren();
  $("library-empty").hidden = documents.length > 0;
  for (const doc of documents) {
    const row = document.createElement("tr");
    row.dataset.source = doc.source;
    cell(row, doc.source);
    cell(row, String(doc.chunks));
    cell(row, (doc.access || []).join(", ") || "admins only");
    cell(row, doc.ingested_at ? doc.ingested_at.replace("T", " ").replace("Z", " UTC") : "—");
    const problem = doc.failure || doc.restricted;
    const note = cell(row, problem ? (doc.failure ? `failed: ${doc.failure}` : `admins only: ${doc.restricted}`) : "");
    if (problem) note.className = "library-problem";
    if (library.admin) removeControl(cell(row, ""), doc.source);
    body.append(row);
  }
  const list = $("library-failures");
  list.replaceChildren();
  for (const failure of failures || []) {
    const item = document.createElement("li");
    item.textContent = `${failure.source}: ${failure.reason}`;
    list.append(item);
  }
}

/** An admin's sources (folders, files, URLs, sites), each removable whole: its documents go
 * and it is forgotten, so a sync does not bring them back. */
function renderRoots(roots) {
  const list = $("library-roots");
  list.replaceChildren();
  for (const root of roots) {
    const item = document.createElement("li");
    item.dataset.source = root.id;
    const text = document.createElement("span");
    const count = `${root.documents} document${root.documents === 1 ? "" : "s"}`;
    text.textContent = `${root.kind} ${root.id} (${count}) `;
    const control = document.createElement("span");
    removeControl(control, root.id);
    item.append(text, control);
    list.append(item);
  }
}

async function refreshLibrary() {
  libraryStatus("Loading…");
  try {
    const listing = await corpusRun("indexer", { action: "sources" });
    library.admin = true;
    renderDocuments(listing.result.documents, listing.result.failures);
    renderRoots(listing.result.sources || []);
  } catch (err) {
    if (!(err instanceof ApiError && err.status === 403)) throw err;
    library.admin = false;
    const readable = await corpusRun("library", {});
    renderDocuments(readable.documents, []);
  }
  $("library-admin").hidden = !library.admin;
  $("library-remove-head").hidden = !library.admin;
  libraryStatus(library.admin ? "You manage this index." : "The documents you may read.");
}

function summaryText(result) {
  if (result.permissions_only) return permissionsText(result);
  const parts = [`${result.added} added`, `${result.updated} updated`, `${result.unchanged} unchanged`,
    `${result.deleted} deleted`, `${result.failed} failed`];
  const reasons = [
    ...(result.errors || []).map((e) => `${e.source}: ${e.error}`),
    ...(result.deletions || []).map((d) => `${d.source}: ${d.reason}`),
  ];
  return `Done: ${parts.join(", ")}.` + (reasons.length ? ` ${reasons.join("; ")}` : "");
}

/** A permission-only sync: readers re-read, nothing embedded (docs/sync.md). */
function permissionsText(result) {
  const parts = [`${result.checked} checked`, `${result.access_changed} access changed`,
    `${result.restricted} admins only`, `${result.failed} failed`];
  const reasons = [
    ...(result.errors || []).map((e) => `${e.source}: ${e.error}`),
    ...(result.restrictions || []).map((r) => `${r.source}: admins only, ${r.reason}`),
  ];
  const why = reasons.length ? ` ${reasons.join("; ")}` : "";
  return `Done: permissions of ${parts.join(", ")}.${why}`;
}

function jobProgressText(p) {
  // The indexer's job says when it waits behind another job on this index, then counts.
  if (p.stage === "queued") return "Queued: another job is indexing; this one starts after it…";
  if (typeof p.done === "number" && typeof p.total === "number") {
    return `Working: ${p.stage} ${p.done}/${p.total}`;
  }
  return "Working…";
}

async function manage(input) {
  if (library.busy) return;
  library.busy = true;
  $("library").setAttribute("aria-busy", "true");
  libraryStatus("Working…");
  try {
    const done = await corpusRun("indexer", input, (p) => {
      if (p && p.stage) libraryStatus(jobProgressText(p));
    });
    const message = summaryText(done.result);
    await refreshLibrary();
    libraryStatus(message);
  } catch (err) {
    libraryStatus(`Failed: ${describeError(err)}`);
  } finally {
    library.busy = false;
    $("library").removeAttribute("aria-busy");
  }
}

function groupsOf(id) {
  return $(id).value.split(",").map((g) => g.trim()).filter(Boolean);
}

async function onUpload(event) {
  event.preventDefault();
  const files = Array.from($("library-file").files);
  if (!files.length) return;
  const uploads = [];
  for (const file of files) {
    const bytes = new Uint8Array(await file.arrayBuffer());
    let binary = "";
    for (let i = 0; i < bytes.length; i += 0x8000) {
      binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
    }
    uploads.push({ name: file.name, content: btoa(binary) });
  }
  await manage({ action: "add", uploads, access: groupsOf("library-groups") });
  $("library-file").value = "";
}

async function onAddUrl(event) {
  event.preventDefault();
  const url = $("library-url").value.trim();
  if (!url) return;
  const input = { action: "add", sources: [url], access: groupsOf("library-url-groups") };
  if ($("library-crawl").checked) input.crawl = { max_depth: 2, max_pages: 50 };
  await manage(input);
  $("library-url").value = "";
}

function toggleLibrary() {
  const panel = $("library");
  const open = panel.hidden;
  panel.hidden = !open;
  $("library-open").setAttribute("aria-expanded", String(open));
  if (open) {
    refreshLibrary().catch((err) => libraryStatus(`Failed: ${describeError(err)}`));
    $("library-title").focus();
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("library-open").addEventListener("click", toggleLibrary);
  $("library-upload").addEventListener("submit", (e) => onUpload(e));
  $("library-add-url").addEventListener("submit", (e) => onAddUrl(e));
  $("library-sync").addEventListener("click", () => manage({ action: "sync" }));
  $("library-sync-permissions").addEventListener(
    "click", () => manage({ action: "sync", permissions_only: true }));
});
