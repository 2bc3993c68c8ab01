/* Footnote's chat page: per-part coverage of an answer.
 *
 * The graph reports `parts`: one entry per part of the question, each covered or not, with
 * the citation numbers of its answer. A question with several parts gets a list under its
 * answer; a part the documents do not cover is marked so that it cannot be missed. (A single
 * uncovered question already gets app.js's "Not covered" badge.) Loaded before app.js, which
 * calls renderParts when it finishes an answer.
 */
"use strict";

function renderParts(turn, values) {
  const parts = Array.isArray(values.parts) ? values.parts : [];
  const previous = turn.querySelector(".parts");
  if (previous) previous.remove();
  if (parts.length < 2) return;
  const box = document.createElement("section");
  box.className = "parts";
  const title = document.createElement("h4");
  title.textContent = `Your question had ${parts.length} parts`;
  const list = document.createElement("ul");
  for (const part of parts) {
    const item = document.createElement("li");
    const covered = part && part.covered === true;
    item.className = covered ? "part covered" : "part uncovered";
    const question = document.createElement("span");
    question.className = "part-question";
    question.textContent = String((part && part.question) || "");
    const status = document.createElement("span");
    status.className = "part-status";
    const cited = covered && Array.isArray(part.citations) ? part.citations : [];
    status.textContent = covered
      ? `answered from ${cited.map((n) => `[${n}]`).join("")}`
      : "Not covered by your documents";
    item.append(question, " — ", status);
    list.append(item);
  }
  box.append(title, list);
  if (parts.some((part) => !part || part.covered !== true)) turn.classList.add("partly-covered");
  turn.querySelector(".checks").prepend(box);
}
