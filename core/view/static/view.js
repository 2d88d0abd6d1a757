// tension-run view: draws the page from its inline JSON (#data). No libraries, no
// network beyond the view's own api; curves are plain SVG.
"use strict";
(function () {
  const D = JSON.parse(document.getElementById("data").textContent);
  const main = document.getElementById("main");
  const NS = "http://www.w3.org/2000/svg";
  const LABEL = {gullible: "gullible M0", experienced: "experienced M+", know_it_all: "know-it-all M*"};

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "on") for (const [ev, f] of Object.entries(v)) e.addEventListener(ev, f);
      // through the CSSOM: the view's Content-Security-Policy refuses style attributes
      else if (k === "style") e.style.cssText = v;
      else if (v !== null && v !== undefined) e.setAttribute(k, v);
    }
    for (const k of kids.flat()) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
    return e;
  }
  function sv(tag, attrs, ...kids) {
    const e = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) if (v !== null && v !== undefined) e.setAttribute(k, v);
    for (const k of kids.flat()) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
    return e;
  }
  const fmt = (v, d = 3) => (v === null || v === undefined || v === "" ? "—" : Number(v).toFixed(d));
  const pct = (v) => (100 * v).toFixed(1) + "%";
  // a value and, when it has one, its 95% interval over the story's own verdicts (docs/metrics.md 1.6)
  const CI_TITLE = "95% interval over resamples of this story's verdicts";
  function withCI(v, iv, d = 3) {
    return [fmt(v, d), iv ? el("span", {class: "ci", title: CI_TITLE}, ` [${fmt(iv[0], d)}, ${fmt(iv[1], d)}]`) : ""];
  }
  const digits = (c) => (c === "retain" || c === "convergence" ? 1 : 3);
  // run.json's degenerate-answer warnings, first, as report.md puts them: they qualify every number below
  function warnings(list) {
    return list && list.length ? el("section", {class: "warnings"},
      el("h2", {}, "Warnings: the models did not do the task as asked"),
      el("ul", {}, list.map((w) => el("li", {}, w)))) : "";
  }

  function notes(list) {
    return list && list.length ? el("ul", {class: "notes"}, list.map((n) => el("li", {}, n))) : "";
  }

  // A chart over x in [0, 1] (or [1, L]) and y in [0, 1]; returns {svg, X, Y}.
  function chart(w, h, xmax, xmin = 0, axes = true, xlabel = (x) => Math.round(100 * x) + "%") {
    const m = axes ? {l: 34, r: 8, t: 8, b: 22} : {l: 1, r: 1, t: 1, b: 1};
    const X = (x) => m.l + ((x - xmin) / (xmax - xmin || 1)) * (w - m.l - m.r);
    const Y = (y) => h - m.b - y * (h - m.t - m.b);
    const svg = sv("svg", {width: w, height: h, viewBox: `0 0 ${w} ${h}`, class: "chart"});
    if (axes) {
      for (const t of [0, 0.25, 0.5, 0.75, 1]) {
        svg.append(sv("line", {x1: m.l, x2: w - m.r, y1: Y(t), y2: Y(t), class: "grid"}));
        svg.append(sv("text", {x: m.l - 4, y: Y(t) + 4, class: "tick", "text-anchor": "end"}, t));
        const x = xmin + t * (xmax - xmin);
        svg.append(sv("text", {x: X(x), y: h - 6, class: "tick", "text-anchor": "middle"}, xlabel(x)));
      }
    }
    return {svg, X, Y};
  }
  function path(pts, X, Y) {
    let d = "", pen = false;
    for (const [x, y] of pts) {
      if (y === null) { pen = false; continue; }
      d += (pen ? "L" : "M") + X(x).toFixed(1) + " " + Y(y).toFixed(1);
      pen = true;
    }
    return d;
  }
  function spark(x, y) {
    const c = chart(120, 28, 1, 0, false);
    c.svg.append(sv("path", {d: path(x.map((v, i) => [v, y[i]]), c.X, c.Y), class: "raw"}));
    return c.svg;
  }

  // A table whose columns sort on click (numbers numerically, empty last).
  function sortable(columns, rows, render) {
    const tbody = el("tbody");
    let key = null, dir = 1;
    const draw = () => { tbody.replaceChildren(...rows.map(render)); };
    const head = el("tr", {}, columns.map(([k, label]) => el("th", {"data-key": k, on: {click: () => {
      dir = key === k ? -dir : 1; key = k;
      rows.sort((a, b) => {
        const u = a.sort[k], v = b.sort[k];
        if (u === null || u === undefined) return 1;
        if (v === null || v === undefined) return -1;
        return (u < v ? -1 : u > v ? 1 : 0) * dir;
      });
      draw();
    }}}, label)));
    draw();
    return el("table", {class: "sortable"}, el("thead", {}, head), tbody);
  }

  // -- pages ---------------------------------------------------------------------
  function runsPage() {
    main.append(el("h1", {}, "tension-run view"),
      el("ul", {}, D.runs.map((r) => el("li", {}, el("a", {href: `r${r.i}/index.html`}, r.dir),
        ` — ${r.kind} run, ${r.stories} stories`, r.unscored ? ` (and ${r.unscored} without positions)` : "",
        r.audit ? [" — ", el("a", {href: `r${r.i}/audit.html`, class: "audit"}, "label its judge's verdicts")] : "",
        notes(r.notes)))));
    if (D.pairs.length) main.append(el("h2", {}, "compare"), el("ul", {}, D.pairs.map(([a, b]) =>
      el("li", {}, el("a", {href: `compare/r${a}-r${b}.html`}, `${D.runs[a].dir} → ${D.runs[b].dir}`)))));
  }

  function groupsTable(cols) {
    const groups = Object.keys(D.groups[cols[0]] || {});
    return el("table", {class: "groups"},
      el("tr", {}, el("th", {}, "group"), el("th", {}, "n"), cols.map((c) => el("th", {}, c))),
      groups.map((g) => el("tr", {}, el("td", {}, g), el("td", {}, D.groups[cols[0]][g].n + D.groups[cols[0]][g].n_nan),
        cols.map((c) => { const s = D.groups[c][g];
          return el("td", {title: `n = ${s.n}, ${s.n_nan} NaN`}, fmt(s.mean),
            s.lo === null ? "" : el("span", {class: "ci"}, ` [${fmt(s.lo)}, ${fmt(s.hi)}]`)); }))));
  }

  function corpusPage() {
    main.append(el("h1", {}, "corpus: " + D.dir), notes(D.notes), warnings(D.warnings),
      el("p", {}, `status ${D.status}; generation ${D.models.generation || "?"}, judge ${D.models.judge || "?"}; `,
        `${D.stories.length} stories`, D.unscored && D.unscored.length ? ` and ${D.unscored.length} without positions (listed last)` : ""),
      el("h2", {}, "groups (mean [95% bootstrap interval])"), groupsTable(D.columns),
      el("h2", {}, "stories (value [95% interval over the story's own verdicts])"));
    const rows = D.stories.map((s) => ({s, sort: {id: s.id, group: s.group, n: s.n_positions, ...s.stats}}));
    main.append(sortable([["id", "story"], ["group", "group"], ["n", "positions"], ...D.columns.map((c) => [c, c]),
      ["curve", "curve"]], rows, ({s}) => el("tr", {"data-id": s.id},
      el("td", {}, el("a", {href: `story/${s.slug}.html`}, s.id)), el("td", {}, s.group), el("td", {}, s.n_positions),
      D.columns.map((c) => el("td", {class: "num"}, withCI(s.stats[c], s.intervals[c], digits(c)))),
      el("td", {}, spark(s.x, s.y)))));
    // stories.csv's stories without a position: listed, greyed, with the reason (no curve, no page of their own)
    if (D.unscored && D.unscored.length) main.append(el("h2", {}, `stories without positions (${D.unscored.length})`),
      el("table", {class: "unscored"}, el("tr", {}, ["story", "group", "why"].map((h) => el("th", {}, h))),
        D.unscored.map((s) => el("tr", {"data-id": s.id}, el("td", {}, s.id), el("td", {}, s.group),
          el("td", {}, s.reason)))));
  }

  function storyPage() {
    const P = D.positions;
    const byK = new Map(P.map((p, j) => [p.k, j]));
    main.append(el("p", {}, el("a", {href: "../index.html"}, "← corpus"), ` run ${D.run_dir}`),
      el("h1", {}, D.id, el("small", {}, ` group ${D.group}`)), notes(D.notes),
      el("p", {class: "stats"}, Object.entries(D.stats).flatMap(([k, v], i) => [i ? " · " : "", `${k} `,
        ...withCI(v, D.intervals[k], digits(k))])),
      D.interval_resamples ? el("p", {class: "legend"}, "[…]: 95% interval over " + D.interval_resamples +
        " resamples of this story's verdicts within each position (the sampling of endings and verdicts at " +
        "these models and prompts; not the choice of story, model or prompt)") : "");
    const text = el("div", {class: "text"});
    const side = el("div", {class: "side"});
    main.append(el("div", {class: "story"}, text, side));
    // the curve: raw points, smoothed line, sharp reversals (angle <= 60 degrees)
    const c = chart(460, 220, 1);
    c.svg.append(sv("path", {d: path(P.map((p) => [p.pct, p.no_rate]), c.X, c.Y), class: "raw"}),
      sv("path", {d: path(P.map((p) => [p.pct, p.smoothed]), c.X, c.Y), class: "smooth"}));
    for (const p of P) if (p.mark) {
      const x = c.X(p.pct), y = c.Y(p.smoothed), s = p.mark === "peak" ? -1 : 1;
      c.svg.append(sv("path", {d: `M${x - 6} ${y + 5 * s}L${x + 6} ${y + 5 * s}L${x} ${y - 7 * s}Z`,
        class: "mark " + p.mark, "data-k": p.k}, sv("title", {}, `sharp ${p.mark} (angle <= 60 degrees)`)));
    }
    const dots = P.map((p) => sv("circle", {cx: c.X(p.pct), cy: c.Y(p.no_rate), r: 3.5, class: "pt", "data-k": p.k},
      sv("title", {}, `k=${p.k} · ${pct(p.pct)} · no-rate ${fmt(p.no_rate)}`)));
    c.svg.append(...dots);
    side.append(c.svg, el("p", {class: "legend"}, "grey: no-rate; blue: smoothed (w=" + D.window +
      "); ▲▼ sharp reversals (angle ≤ 60°). Hover a point for its sentence, click a sentence for its endings."));
    const panel = el("div", {id: "endings"});
    side.append(panel);
    // the text: sentence i is the anchor of position k = i + 1, shaded by its no-rate
    const spans = new Map();
    if (!D.sentences) text.append(el("p", {class: "notes"}, "The story's text is not available."));
    (D.sentences || []).forEach((s, i) => {
      const j = byK.get(i + 1);
      const attrs = {class: "s"};
      if (j !== undefined) {
        Object.assign(attrs, {class: "s pos", "data-k": i + 1, style: `background: rgba(214, 39, 40, ${(0.45 * P[j].no_rate).toFixed(3)})`,
          title: `k=${i + 1}: no-rate ${fmt(P[j].no_rate)}`, on: {click: () => select(i + 1)}});
      }
      const span = el("span", attrs, s, " ");
      if (j !== undefined) spans.set(i + 1, span);
      text.append(span);
    });
    dots.forEach((d, j) => {
      const k = P[j].k;
      d.addEventListener("mouseenter", () => { const s = spans.get(k); if (s) { s.classList.add("hover"); s.scrollIntoView({block: "nearest"}); } });
      d.addEventListener("mouseleave", () => { const s = spans.get(k); if (s) s.classList.remove("hover"); });
      d.addEventListener("click", () => select(k));
    });
    function select(k) {
      for (const d of dots) d.classList.toggle("sel", d.dataset.k === String(k));
      for (const [kk, s] of spans) s.classList.toggle("sel", kk === k);
      const p = P[byK.get(k)];
      panel.replaceChildren(el("h3", {}, `position k=${k} · ${pct(p.pct)} revealed · no-rate ${fmt(p.no_rate)}`),
        el("p", {}, `${p.n_endings} endings: ${p.n_match} match, ${p.n_empty} empty, ${p.n_malformed} malformed`),
        el("p", {class: "loading"}, "loading the endings…"));
      load("endings", D.slug, k).then((e) => showEndings(e, k), (err) => panel.append(el("p", {class: "notes"}, String(err))));
    }
    function showEndings(e, k) {
      panel.querySelector(".loading").remove();
      if (!e.cached) { panel.append(el("p", {class: "notes"}, e.message || "the endings are not cached")); return; }
      panel.append(el("p", {}, `generation ${e.generation_model}, judge ${e.judge_model}`),
        el("ol", {class: "endings", "data-k": k}, e.endings.map((x) => el("li", {class: "ending v-" + x.verdict.replace(" ", "-"), "data-verdict": x.verdict},
          el("span", {class: "verdict"}, x.verdict), " ", x.text || "(empty)",
          x.raw === null ? "" : el("details", {}, el("summary", {}, "judge's answer"), el("pre", {}, x.raw)))))); 
    }
  }

  // endings/continuations: the api (server), or a script written by --export --endings
  // An exported story's endings file is loaded once and kept: a second click reads it here, not the file again.
  const waiting = {}, loaded = {};
  window.tensionView = {loaded(kind, slug, data) {
    loaded[kind + slug] = data;
    (waiting[kind + slug] || []).forEach((f) => f(data));
    delete waiting[kind + slug];
  }};
  function load(kind, slug, k) {
    if (D.mode === "server") {
      return fetch(`${D.root}api/r${D.run}/${kind}/${slug}/${k}.json`).then((r) => r.json());
    }
    if (!D.with_endings) {
      return Promise.resolve({cached: false, message: `the ${kind} were not exported (view RUN --export DIR --endings)`});
    }
    const key = kind + slug;
    if (key in loaded) return Promise.resolve(loaded[key][k]);
    return new Promise((resolve) => {
      const first = !(key in waiting);
      (waiting[key] = waiting[key] || []).push((data) => resolve(data[k]));
      if (first) document.body.append(el("script", {src: `${D.root}r${D.run}/${kind}/${slug}.js`}));
    });
  }

  function comparePage() {
    main.append(el("h1", {}, "compare: B − A"), el("p", {}, `A = ${D.a} (judge ${D.models_a.judge}), B = ${D.b} (judge ${D.models_b.judge}); `,
      `${D.stories.length} stories paired by id, ${D.unpaired_a} only in A, ${D.unpaired_b} only in B`), notes(D.notes));
    if (D.summary.length) main.append(el("h2", {}, "paired summary"), el("table", {class: "summary"},
      el("tr", {}, ["statistic", "pairs", "A", "B", "B − A", "95% interval", "", "t", "p"].map((h) => el("th", {}, h))),
      D.summary.map((r) => el("tr", {}, el("td", {}, r.stat), el("td", {}, r.n_pairs), el("td", {}, fmt(r.mean_a)),
        el("td", {}, fmt(r.mean_b)), el("td", {}, fmt(r.diff)), el("td", {}, `[${fmt(r.lo)}, ${fmt(r.hi)}]`),
        r.finding ? el("td", {}, "✓") : r.significant ? el("td", {title: r.why_not}, "no finding ‡") : el("td", {}, "n.s."),
        el("td", {}, fmt(r.t, 2)), el("td", {}, fmt(r.p, 3))))),
      el("p", {class: "legend"}, "✓: a finding: p < 0.05 and the interval excludes 0, for a statistic that can support "
        + "it; no finding ‡: significant, but the statistic cannot support it at these runs' endings (hover for why; "
        + "docs/metrics.md 1.9)"));
    const detail = el("div", {id: "pair"});
    const rows = D.stories.map((s) => ({s, sort: {id: s.id, group: s.group, ...s.diff}}));
    main.append(el("h2", {}, "per story (click a story for its positions)"), detail,
      sortable([["id", "story"], ["group", "group"], ...D.columns.map((c) => [c, "Δ " + c])], rows, ({s}) =>
        el("tr", {"data-id": s.id, class: "click", on: {click: () => showPair(s)}}, el("td", {}, s.id), el("td", {}, s.group),
          D.columns.map((c) => el("td", {class: "num"}, withCI(s.diff[c], s.diff_ci && s.diff_ci[c], digits(c)))))));
    function showPair(s) {
      const c = chart(560, 220, 1);
      c.svg.append(sv("path", {d: path(s.positions.map((p) => [p.pct, p.a]), c.X, c.Y), class: "a"}),
        sv("path", {d: path(s.positions.map((p) => [p.pct, p.b]), c.X, c.Y), class: "b"}));
      detail.replaceChildren(el("h3", {}, s.id, " ", el("a", {href: `../r${D.run_a}/story/${s.slug_a}.html`}, "A"), " ",
        el("a", {href: `../r${D.run_b}/story/${s.slug_b}.html`}, "B")), c.svg,
        el("p", {class: "legend"}, "orange: A, blue: B"),
        el("table", {class: "positions"}, el("tr", {}, ["k", "% revealed", "A", "B", "B − A"].map((h) => el("th", {}, h))),
          s.positions.map((p) => el("tr", {}, el("td", {}, p.k), el("td", {}, pct(p.pct)), el("td", {}, fmt(p.a)),
            el("td", {}, fmt(p.b)), el("td", {class: "num"}, fmt(p.diff))))));
    }
  }

  function fairplayPage() {
    main.append(el("h1", {}, "fair play: " + D.dir), notes(D.notes),
      el("p", {}, `reader ${D.models.reader || "?"}, judge ${D.models.judge || "?"}; solid: the culprit's probability, `,
        "dashed: the distractor's; the grey line marks the revelation."));
    for (const s of D.stories) {
      const c = chart(520, 200, s.L, 1, true, (x) => "¶" + Math.round(x));
      if (s.revelation) c.svg.append(sv("line", {x1: c.X(s.revelation), x2: c.X(s.revelation), y1: 8, y2: 178, class: "reveal"}));
      for (const [name, r] of Object.entries(s.readers)) {
        for (const part of ["culprit", "distractor"]) {
          const pts = r[part].map((v, i) => [i + 1, v]).filter(([, v]) => v !== null);
          c.svg.append(sv("path", {d: path(pts, c.X, c.Y), class: `reader ${name} ${part}`}));
          for (const [x, y] of pts) c.svg.append(sv("circle", {cx: c.X(x), cy: c.Y(y), r: 2.5, class: `reader ${name}`},
            sv("title", {}, `${LABEL[name] || name}, paragraph ${x}: ${part} ${fmt(y)}`)));
        }
      }
      const box = el("div", {class: "continuations"});
      main.append(el("section", {class: "fp", "data-id": s.id}, el("h2", {}, s.id, el("small", {}, ` group ${s.group}`)),
        el("p", {}, `culprit ${s.culprit}, distractor ${s.distractor || "—"}; suspects: ${s.suspects.join(", ")}`),
        el("p", {class: "stats"}, Object.entries(s.scores).map(([k, v]) => `${k} ${fmt(v)}`).join(" · ")),
        c.svg, el("p", {class: "legend"}, Object.keys(s.readers).map((n) => el("span", {class: "key " + n}, LABEL[n] || n))),
        s.checkpoints.length ? el("p", {}, "know-it-all checkpoints: ", s.checkpoints.map((p) =>
          el("button", {"data-p": p, on: {click: () => showCheckpoint(s, p, box)}}, `after ¶${p}`))) : "", box));
    }
    function showCheckpoint(s, p, box) {
      box.replaceChildren(el("p", {class: "loading"}, "loading…"));
      load("continuations", s.slug, p).then((d) => {
        if (!d.cached && !d.continuations.length) { box.replaceChildren(el("p", {class: "notes"}, d.message)); return; }
        box.replaceChildren(el("h3", {}, `${d.continuations.length} continuations after paragraph ${p}`),
          el("ol", {class: "conts"}, d.continuations.map((x) => el("li", {"data-culprit": x.culprit || ""},
            el("b", {}, x.culprit ? `reveals ${x.culprit}` : x.error), el("div", {}, x.paragraphs.map((t) => el("p", {}, t)))))));
      });
    }
  }

  function errorPage() { main.append(el("h1", {}, "not shown"), el("p", {class: "error"}, D.message)); }

  const pages = {runs: runsPage, score: corpusPage, story: storyPage, compare: comparePage, fairplay: fairplayPage, error: errorPage};
  pages[D.kind]();
})();
