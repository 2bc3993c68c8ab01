/* Footnote's chat page: a model's answer rendered as a safe subset of Markdown.
 *
 * Paragraphs, headings, bulleted and numbered lists, block quotes, fenced code, tables, inline
 * code, bold and italic. Everything is built with createElement and text nodes: no HTML in
 * the answer is ever parsed (a <script> or <img onerror> shows as the text it is), and
 * nothing is assigned to innerHTML. A Markdown link becomes a link only when its address is
 * one of the answer's cited sources (`allowedHref`); any other shows as its text. Citation
 * markers [n] are handed to `cite(n)`, which returns the page's citation link or null. The
 * page's Content-Security-Policy stays as strict as before (only this file is added).
 * Loaded before app.js, which calls renderMarkdown when it finishes an answer.
 */
"use strict";

const MD_FENCE = /^\s{0,3}(```|~~~)\s*([\w+-]*)\s*$/;
const MD_HEADING = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const MD_BULLET = /^\s{0,3}[-*+]\s+(.*)$/;
const MD_NUMBERED = /^\s{0,3}(\d{1,9})[.)]\s+(.*)$/;
const MD_QUOTE = /^\s{0,3}>\s?(.*)$/;
const MD_TABLE_RULE = /^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$/;

/** The answer as a DocumentFragment of safe elements. */
function renderMarkdown(text, options) {
  const fragment = document.createDocumentFragment();
  const lines = String(text).replace(/\r\n?/g, "\n").split("\n");
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (!line.trim()) {
      i += 1;
      continue;
    }
    const fence = line.match(MD_FENCE);
    if (fence) {
      const body = [];
      i += 1;
      while (i < lines.length && !(lines[i].trim().startsWith(fence[1]))) {
        body.push(lines[i]);
        i += 1;
      }
      i += 1; // the closing fence (or the end)
      const pre = document.createElement("pre");
      const code = document.createElement("code");
      if (fence[2]) code.dataset.language = fence[2];
      code.textContent = body.join("\n");
      pre.append(code);
      fragment.append(pre);
      continue;
    }
    const heading = line.match(MD_HEADING);
    if (heading) {
      // An answer's headings sit below the page's own: # is h3, ###### stays h6.
      const level = Math.min(6, heading[1].length + 2);
      const h = document.createElement(`h${level}`);
      h.className = "md-heading";
      appendInline(h, heading[2], options);
      fragment.append(h);
      i += 1;
      continue;
    }
    if (line.includes("|") && i + 1 < lines.length && MD_TABLE_RULE.test(lines[i + 1])) {
      const rows = [line];
      i += 2;
      while (i < lines.length && lines[i].includes("|") && lines[i].trim()) {
        rows.push(lines[i]);
        i += 1;
      }
      fragment.append(renderTable(rows, options));
      continue;
    }
    if (MD_BULLET.test(line) || MD_NUMBERED.test(line)) {
      const numbered = !MD_BULLET.test(line);
      const pattern = numbered ? MD_NUMBERED : MD_BULLET;
      const list = document.createElement(numbered ? "ol" : "ul");
      if (numbered) {
        const start = Number(line.match(MD_NUMBERED)[1]);
        if (start !== 1) list.start = start;
      }
      let item = null;
      while (i < lines.length && lines[i].trim()) {
        const match = lines[i].match(pattern);
        if (match) {
          item = document.createElement("li");
          appendInline(item, match[numbered ? 2 : 1], options);
          list.append(item);
        } else if (item && /^\s+/.test(lines[i])) {
          item.append(document.createTextNode(" "));
          appendInline(item, lines[i].trim(), options);
        } else {
          break;
        }
        i += 1;
      }
      fragment.append(list);
      continue;
    }
    if (MD_QUOTE.test(line)) {
      const quoted = [];
      while (i < lines.length && MD_QUOTE.test(lines[i])) {
        quoted.push(lines[i].match(MD_QUOTE)[1]);
        i += 1;
      }
      const quote = document.createElement("blockquote");
      quote.append(renderMarkdown(quoted.join("\n"), options));
      fragment.append(quote);
      continue;
    }
    const paragraph = [];
    while (
      i < lines.length && lines[i].trim() && !MD_FENCE.test(lines[i]) &&
      !MD_HEADING.test(lines[i]) && !MD_BULLET.test(lines[i]) && !MD_NUMBERED.test(lines[i]) &&
      !MD_QUOTE.test(lines[i])
    ) {
      paragraph.push(lines[i].trim());
      i += 1;
    }
    const p = document.createElement("p");
    appendInline(p, paragraph.join(" "), options);
    fragment.append(p);
  }
  return fragment;
}

function tableCells(row) {
  let inner = row.trim();
  if (inner.startsWith("|")) inner = inner.slice(1);
  if (inner.endsWith("|")) inner = inner.slice(0, -1);
  return inner.split("|").map((cell) => cell.trim());
}

function renderTable(rows, options) {
  const wrap = document.createElement("div");
  wrap.className = "md-table"; // scrolls sideways on its own, never the page
  const table = document.createElement("table");
  const head = document.createElement("thead");
  const headRow = document.createElement("tr");
  const columns = tableCells(rows[0]);
  for (const cell of columns) {
    const th = document.createElement("th");
    th.scope = "col";
    appendInline(th, cell, options);
    headRow.append(th);
  }
  head.append(headRow);
  const body = document.createElement("tbody");
  for (const row of rows.slice(1)) {
    const tr = document.createElement("tr");
    const cells = tableCells(row);
    for (let c = 0; c < columns.length; c += 1) {
      const td = document.createElement("td");
      appendInline(td, cells[c] || "", options);
      tr.append(td);
    }
    body.append(tr);
  }
  table.append(head, body);
  wrap.append(table);
  return wrap;
}

const MD_INLINE = /`([^`]+)`|\*\*([^*]+)\*\*|__([^_]+)__|\*([^*\s][^*]*)\*|\b_([^_\s][^_]*)_\b|\[([^\]]+)\]\(([^)\s]+)\)|\[(\d+)\]/g;

/** Inline Markdown of `text` appended to `parent` as text nodes and safe elements. */
function appendInline(parent, text, options) {
  const opts = options || {};
  let last = 0;
  for (const match of text.matchAll(MD_INLINE)) {
    if (match.index > last) parent.append(document.createTextNode(text.slice(last, match.index)));
    last = match.index + match[0].length;
    const [, code, bold1, bold2, em1, em2, label, href, cited] = match;
    if (code !== undefined) {
      const element = document.createElement("code");
      element.textContent = code;
      parent.append(element);
    } else if (bold1 !== undefined || bold2 !== undefined) {
      const element = document.createElement("strong");
      appendInline(element, bold1 !== undefined ? bold1 : bold2, opts);
      parent.append(element);
    } else if (em1 !== undefined || em2 !== undefined) {
      const element = document.createElement("em");
      appendInline(element, em1 !== undefined ? em1 : em2, opts);
      parent.append(element);
    } else if (label !== undefined) {
      const allowed = typeof opts.allowedHref === "function" ? opts.allowedHref(href) : null;
      if (allowed) {
        const link = document.createElement("a");
        link.href = allowed;
        link.rel = "noopener noreferrer";
        link.target = "_blank";
        link.className = "md-link";
        appendInline(link, label, opts);
        parent.append(link);
      } else {
        appendInline(parent, label, opts); // not a cited source: its text only
      }
    } else {
      const node = typeof opts.cite === "function" ? opts.cite(Number(cited)) : null;
      parent.append(node || document.createTextNode(match[0]));
    }
  }
  if (last < text.length) parent.append(document.createTextNode(text.slice(last)));
}
