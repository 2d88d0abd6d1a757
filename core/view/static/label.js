// tension-run view: the labelling page of a run's audit (core/view/labelling.py). Blind: the
// judge's answer is never sent to it. Keys y / n / s answer, b (or ←) goes back, → forward.
// Every answer is written at once (POST with the view's token); the page keeps nothing the
// server does not have, so a reload or a restart resumes where the annotator stopped.
"use strict";
(function () {
  const D = JSON.parse(document.getElementById("data").textContent);
  const main = document.getElementById("main");
  const api = `${D.root}api/r${D.run}/audit/`;
  const ANSWERS = [["matches", "y", "matches"], ["does-not-match", "n", "does not match"],
                   ["cant-tell", "s", "can't tell"]];
  const STORE = "tension-run annotator";
  let who = null, state = null, cursor = 0, busy = false, item = null;

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "on") for (const [ev, f] of Object.entries(v)) e.addEventListener(ev, f);
      else if (v !== null && v !== undefined) e.setAttribute(k, v);
    }
    for (const k of kids.flat()) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
    return e;
  }
  const said = (text, cls) => document.getElementById("said").replaceChildren(text ? el("p", {class: cls}, text) : "");

  async function getJSON(path) {
    const r = await fetch(api + path, {cache: "no-store"});
    const d = await r.json();
    if (!r.ok) throw new Error(d.error || r.status);
    return d;
  }

  // -- who labels --------------------------------------------------------------------
  function askName() {
    const input = el("input", {id: "annotator", autocomplete: "off", maxlength: "40", placeholder: "your name"});
    const start = () => { const n = input.value.trim(); if (n) begin(n); };
    input.addEventListener("keydown", (e) => { if (e.key === "Enter") start(); });
    main.replaceChildren(el("h1", {}, "label: " + D.dir),
      el("p", {}, `${D.items} predicted endings of this run, ${D.shared} of them shown to every annotator. ` +
        "For each: does the predicted ending capture the general direction of what actually happens? " +
        "The judge's answer is not shown."),
      el("p", {}, el("label", {for: "annotator"}, "Your name: "), input, " ",
        el("button", {id: "start", on: {click: start}}, "start")),
      Object.keys(D.annotators).length ? el("p", {}, "Go on as: ", Object.entries(D.annotators).map(([n, c]) =>
        el("button", {class: "who", "data-name": n, on: {click: () => begin(n)}}, `${n} (${c})`))) : "",
      el("div", {id: "said"}));
    input.focus();
  }

  async function begin(name) {
    try {
      state = await getJSON(`${encodeURIComponent(name)}/state.json`);
    } catch (e) { said(String(e.message), "error"); return; }
    who = state.annotator;
    try { localStorage.setItem(STORE, who); } catch (e) { /* private mode: the name is asked again */ }
    if (location.hash !== "#" + encodeURIComponent(who)) history.replaceState(null, "", "#" + encodeURIComponent(who));
    cursor = state.labelled.length;
    await show();
  }

  // -- one item ----------------------------------------------------------------------
  function current() {
    return cursor < state.labelled.length ? state.labelled[cursor] : (state.next === null ? null : {index: state.next});
  }

  async function show() {
    const at = current();
    const progress = el("p", {class: "progress", id: "progress"},
      `${who}: ${state.done} labelled, ${state.left} left` +
      (state.shared ? ` (shared: ${state.shared_done} of ${state.shared})` : ""),
      cursor < state.labelled.length ? ` — back at ${cursor + 1} of your ${state.labelled.length}` : "");
    const head = [el("h1", {}, "label: " + D.dir), progress,
      el("p", {class: "who"}, el("button", {id: "switch", on: {click: () => { who = null; askName(); }}}, "not " + who + "?"))];
    if (at === null) {
      main.replaceChildren(...head, el("p", {class: "done", id: "done"}, "Done: nothing is left for you to label. Thank you."),
        el("p", {}, el("button", {id: "back", on: {click: back}}, "back (b)")), el("div", {id: "said"}));
      item = null;
      return;
    }
    try {
      item = await getJSON(`item/${at.index}.json`);
    } catch (e) { main.replaceChildren(...head, el("div", {id: "said"})); said(String(e.message), "error"); return; }
    const given = at.label || null;
    const story = el("div", {class: "lab-text prefix"}, item.prefix);
    main.replaceChildren(...head,
      el("article", {class: "item", id: "item", "data-key": item.key, "data-index": item.index},
        el("h2", {}, `story ${item.story}, after sentence ${item.k} (${Math.round(100 * item.pct)}% of the story)`,
          item.shared ? el("small", {}, " shared") : ""),
        el("h3", {}, "The story so far"), story,
        el("h3", {}, "What actually happens next"), el("div", {class: "lab-text continuation"}, item.continuation),
        el("h3", {}, "A predicted ending"), el("div", {class: "lab-text predicted"}, item.predicted),
        el("p", {class: "question"}, "Does the predicted ending capture the general direction of what actually " +
          "happens (similar characters, similar kinds of events, a matching emotional arc), even if details differ?"),
        el("p", {class: "answers"}, ANSWERS.map(([value, key, text]) =>
          el("button", {class: "answer" + (given === value ? " given" : ""), "data-label": value,
            on: {click: () => answer(value)}}, `${text} (${key})`)),
          " ", el("button", {id: "back", on: {click: back}, disabled: cursor === 0 ? "" : null}, "back (b)"),
          cursor < state.labelled.length ? el("button", {id: "forward", on: {click: forward}}, "forward (→)") : "")),
      el("div", {id: "said"}));
    story.scrollTop = story.scrollHeight;  // the anchor, the last sentence the reader saw, in view
  }

  async function answer(value) {
    if (busy || item === null) return;
    busy = true;
    try {
      const r = await fetch(api + "label", {method: "POST", cache: "no-store",
        headers: {"Content-Type": "application/json", "X-Tension-Token": D.token},
        body: JSON.stringify({annotator: who, key: item.key, label: value})});
      const d = await r.json();
      if (!r.ok) throw new Error(d.error || r.status);
      const wasBack = cursor < state.labelled.length;
      state = d;
      cursor = wasBack ? Math.min(cursor + 1, state.labelled.length) : state.labelled.length;
      await show();
    } catch (e) {
      said(`not saved: ${e.message}`, "error");
    } finally { busy = false; }
  }

  function back() { if (!busy && cursor > 0) { cursor -= 1; show(); } }
  function forward() { if (!busy && cursor < state.labelled.length) { cursor += 1; show(); } }

  document.addEventListener("keydown", (e) => {
    if (who === null || e.ctrlKey || e.metaKey || e.altKey || e.target.tagName === "INPUT") return;
    const k = e.key.toLowerCase();
    const hit = ANSWERS.find(([, key]) => key === k);
    if (hit) { e.preventDefault(); answer(hit[0]); }
    else if (k === "b" || e.key === "ArrowLeft") { e.preventDefault(); back(); }
    else if (e.key === "ArrowRight") { e.preventDefault(); forward(); }
  });

  let remembered = null;
  try { remembered = localStorage.getItem(STORE); } catch (e) { /* none */ }
  const fromHash = location.hash.length > 1 ? decodeURIComponent(location.hash.slice(1)) : null;
  if (fromHash || remembered) begin(fromHash || remembered); else askName();
})();
