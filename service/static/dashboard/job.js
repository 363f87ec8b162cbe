// The job page: curves (polled while the sweep runs; per cell the mean ± std band over seeds, each seed on
// request, log or linear axes), heat map, parallel coordinates (log axes where a parameter spans decades),
// regulariser curves, the copy buttons; every chart says so while it has nothing to draw. Data from
// /ui/data/jobs/<id>/... (downsampled on the server).
"use strict";

(function () {
  const root = document.getElementById("job");
  if (!root) return;
  const S = window.smartune;
  const job = root.dataset.job;
  const base = "/ui/data/jobs/" + encodeURIComponent(job);
  const POLL_MS = 5000;
  let final = root.dataset.final === "1";
  let best = null;
  const status = document.getElementById("curves-status");

  let curves = null; // the last /curves answer for score and train_loss: the toggles redraw from it
  let regularizer = null; // and the regulariser's
  const logChoice = {}; // chart id -> the reader's log / linear choice (else the server's, from the data)
  const seeds = document.getElementById("curves-seeds");

  function bestTrial(trials) {
    let top = null, topValue = -Infinity;
    for (const t of trials) {
      for (const p of t.curves.score || []) if (p[1] > topValue) { topValue = p[1]; top = t.trial_id; }
    }
    return top;
  }

  const waiting = () => (final ? "No epoch was logged." : "Waiting for the first epoch…");

  // The options of one curve chart: its log axis (the reader's choice, else the server's), the seeds.
  function curveOptions(id, data, key) {
    const log = id in logChoice ? logChoice[id] : Boolean(data.log && data.log[key]);
    const box = document.querySelector('.log-toggle[data-chart="' + id + '"]');
    if (box) box.checked = log;
    return { highlight: best, seeds: Boolean(seeds && seeds.checked), log, emptyText: waiting() };
  }

  function drawScoreAndLoss() {
    const score = document.getElementById("chart-score"), loss = document.getElementById("chart-loss");
    return Promise.all([
      S.drawCurves(score, curves, "score", "dev " + root.dataset.metric, curveOptions("chart-score", curves, "score")),
      S.drawCurves(loss, curves, "train_loss", "training loss", curveOptions("chart-loss", curves, "train_loss")),
    ]);
  }

  async function drawMainCurves() {
    curves = await S.getJSON(base + "/curves?key=score&key=train_loss&max_points=200");
    best = bestTrial(curves.trials);
    await drawScoreAndLoss();
    status.textContent = curves.points + " points" + (final ? "" : " · updating every " + POLL_MS / 1000 + " s");
  }

  // A polled chart is drawn again only when its answer changed (a WebGL redraw of 500 lines is not free).
  const answers = {};
  function changed(id, url, answer) {
    const text = url + JSON.stringify(answer);
    if (answers[id] === text) return false;
    answers[id] = text;
    return true;
  }

  async function drawHeatmap(polled) {
    const form = document.getElementById("heatmap-axes");
    const el = document.getElementById("chart-heatmap");
    if (!form || !el) return;
    const x = form.elements.x.value, y = form.elements.y.value;
    if (x === y) { el.dataset.cells = "0"; delete answers["chart-heatmap"]; S.empty(el, "Choose two different axes."); return; }
    const url = base + "/heatmap?x=" + encodeURIComponent(x) + "&y=" + encodeURIComponent(y);
    const h = await S.getJSON(url);
    if (!changed("chart-heatmap", url, h) && polled && el.dataset.empty !== "1") return;
    const text = h.z.map((row, i) => row.map((m, j) => m === null ? "no score" : m.toFixed(4) + "<br>" +
      (h.std[i][j] === null ? "n=" + h.n[i][j] + ", no std" : "n=" + h.n[i][j] + " sd=" + h.std[i][j].toFixed(4))));
    let cells = 0;
    h.n.forEach((row) => row.forEach((n) => { if (n > 0) cells += 1; }));
    el.dataset.cells = String(cells);
    if (!cells) { S.empty(el, final ? "No trial has a score." : "Waiting for the first scored epoch…"); return; }
    S.clearEmpty(el);
    const means = h.z.flat().filter((m) => m !== null); // the colour bar spans exactly the cells' means
    const low = Math.min(...means), high = Math.max(...means);
    await Plotly.react(el, [Object.assign({
      type: "heatmap", x: h.x_values, y: h.y_values, z: h.z, text, texttemplate: "%{text}",
      hovertemplate: x + "=%{x}<br>" + y + "=%{y}<br>%{text}<extra></extra>", colorscale: "Viridis",
      xgap: 2, ygap: 2, colorbar: { title: { text: "mean " + root.dataset.metric } },
    }, high > low ? { zmin: low, zmax: high, zauto: false } : {})], { margin: { l: 90, r: 20, t: 20, b: 60 }, height: 360, xaxis: { type: "category", title: { text: x } },
      yaxis: { type: "category", title: { text: y } } }, S.config);
  }

  let parallel = null; // the last /parallel answer
  const parallelLog = {}; // dimension label -> log axis on or off (the reader's choice, else the server's)

  // A parameter's value as a tick shows it: 2e-5, 0.3, 10.
  const tick = (v) => (v !== 0 && (Math.abs(v) < 1e-3 || Math.abs(v) >= 1e5)
    ? Number(v.toPrecision(3)).toExponential().replace("e+", "e") : String(Number(v.toPrecision(4))));

  // A log dimension: log10 of the values, ticks at the values themselves (or at each decade when many).
  function logDimension(d) {
    const distinct = [...new Set(d.values)].sort((a, b) => a - b);
    const dim = { label: d.label + " (log)", values: d.values.map(Math.log10) };
    if (distinct.length <= 8) {
      dim.tickvals = distinct.map(Math.log10); dim.ticktext = distinct.map(tick);
    } else {
      const lo = Math.floor(Math.log10(distinct[0])), hi = Math.ceil(Math.log10(distinct.at(-1)));
      dim.tickvals = []; dim.ticktext = [];
      for (let e = lo; e <= hi; e += 1) { dim.tickvals.push(e); dim.ticktext.push("1e" + e); }
    }
    return dim;
  }

  // One checkbox per dimension a log axis can show (all values positive), ticked where it is on.
  function parallelToggles(dimensions) {
    const box = document.getElementById("parallel-log");
    if (!box || box.dataset.built === "1") return;
    box.dataset.built = "1";
    for (const d of dimensions.slice(0, -1)) {
      if (d.ticks || !d.values.length || !d.values.every((v) => v > 0)) continue;
      const label = document.createElement("label"), input = document.createElement("input");
      input.type = "checkbox"; input.name = d.label; input.checked = parallelLog[d.label];
      input.addEventListener("change", () => { parallelLog[d.label] = input.checked; drawParallelData().catch(showError); });
      label.append(input, " " + d.label);
      box.append(label);
    }
  }

  async function drawParallel(polled) {
    const el = document.getElementById("chart-parallel");
    if (!el) return;
    const answer = await S.getJSON(base + "/parallel");
    if (!changed("chart-parallel", "", answer) && polled && el.dataset.empty !== "1") return;
    parallel = answer;
    for (const d of parallel.dimensions) if (!(d.label in parallelLog)) parallelLog[d.label] = Boolean(d.log);
    await drawParallelData();
  }

  async function drawParallelData() {
    const el = document.getElementById("chart-parallel");
    if (!el || !parallel) return;
    const metricDim = parallel.dimensions.at(-1);
    el.dataset.lines = String(metricDim.values.length);
    if (!metricDim.values.length) { S.empty(el, final ? "No trial has a score." : "Waiting for the first scored epoch…"); return; }
    S.clearEmpty(el);
    parallelToggles(parallel.dimensions);
    const dims = parallel.dimensions.map((d) => {
      if (parallelLog[d.label] && d.values.every((v) => v > 0)) return logDimension(d);
      const dim = { label: d.label, values: d.values };
      if (d.ticks) { dim.tickvals = d.ticks.map((_, i) => i); dim.ticktext = d.ticks; }
      if (d.range && d.range[1] > d.range[0]) dim.range = d.range;
      return dim;
    });
    el.dataset.log = dims.filter((d) => d.label.endsWith(" (log)")).map((d) => d.label.slice(0, -6)).join(",");
    const line = { color: metricDim.values, colorscale: "Viridis", showscale: true,
      colorbar: { title: { text: metricDim.label } } };
    if (metricDim.range && metricDim.range[1] > metricDim.range[0]) { line.cmin = metricDim.range[0]; line.cmax = metricDim.range[1]; }
    await Plotly.react(el, [{ type: "parcoords", dimensions: dims, line }],
      { margin: { l: 70, r: 90, t: 50, b: 20 }, height: 380 }, S.config);
  }

  function drawRegularizerData() {
    const select = document.getElementById("regularizer-key");
    const el = document.getElementById("chart-regularizer");
    if (!select || !el || !regularizer) return Promise.resolve();
    const key = select.value;
    return S.drawCurves(el, regularizer, key, key, curveOptions("chart-regularizer", regularizer, key));
  }

  async function drawRegularizer() {
    const select = document.getElementById("regularizer-key");
    if (!select) return;
    regularizer = await S.getJSON(base + "/curves?key=" + encodeURIComponent(select.value) + "&max_points=200");
    await drawRegularizerData();
  }

  function bindCopies() {
    for (const button of document.querySelectorAll("button.copy")) {
      button.addEventListener("click", async () => {
        const text = document.getElementById(button.dataset.copy).textContent;
        try { await navigator.clipboard.writeText(text); button.textContent = "Copied"; }
        catch (e) { button.textContent = "Select and copy"; }
      });
    }
  }

  async function refreshStatus() {
    const s = await S.getJSON(base + "/status");
    const state = document.getElementById("live-state");
    state.textContent = s.state;
    state.className = "state state-" + s.state;
    document.getElementById("live-trials").textContent = s.progress.trials_done + " done, " +
      s.progress.trials_running + " running, of " + s.progress.trials_planned;
    const bar = document.getElementById("live-epochs");
    bar.max = s.progress.epochs_planned || 1;
    bar.value = s.progress.epochs_done;
    document.getElementById("live-epochs-text").textContent = s.progress.epochs_done + " / " + s.progress.epochs_planned;
    document.getElementById("live-best").textContent = s.best_value === null ? "–" : Number(s.best_value).toPrecision(4);
    return s.final;
  }

  async function poll() {
    try {
      const nowFinal = await refreshStatus();
      final = final || nowFinal; // the last round's empty charts say "no epoch was logged", not "waiting"
      await drawMainCurves();
      if (drawn.has("chart-regularizer")) await drawRegularizer();
      if (drawn.has("chart-heatmap")) await drawHeatmap(true); // new cells score while the sweep runs
      if (drawn.has("chart-parallel")) await drawParallel(true);
      if (nowFinal) { status.textContent = "finished"; return; }
    } catch (e) {
      status.textContent = "could not update: " + e.message;
    }
    window.setTimeout(poll, POLL_MS);
  }

  // Charts below the first screen are drawn when they come near the viewport: the page is usable (header,
  // learning curves) as soon as possible, and a 500-trial parallel-coordinates chart (WebGL) is only paid
  // for by those who scroll to it. `body[data-charts=all]` once every chart is drawn.
  const lazy = [["chart-heatmap", drawHeatmap], ["chart-parallel", drawParallel], ["chart-regularizer", drawRegularizer]];
  const drawn = new Set();

  function markAll() {
    if (lazy.every(([id]) => drawn.has(id) || !document.getElementById(id))) document.body.dataset.charts = "all";
  }

  function drawLazily() {
    const observer = new IntersectionObserver((entries) => {
      for (const entry of entries) {
        if (!entry.isIntersecting) continue;
        observer.unobserve(entry.target);
        const draw = lazy.find(([id]) => id === entry.target.id)[1];
        draw().catch(showError).finally(() => { drawn.add(entry.target.id); markAll(); });
      }
    }, { rootMargin: "300px 0px" });
    for (const [id] of lazy) { const el = document.getElementById(id); if (el) observer.observe(el); }
    markAll();
  }

  // The log / linear checkboxes of the curve charts, and "each seed": redraw from the data at hand.
  function bindCurveToggles() {
    const redraw = (id) => (id === "chart-regularizer" ? drawRegularizerData() : curves ? drawScoreAndLoss() : Promise.resolve());
    for (const box of document.querySelectorAll(".log-toggle")) {
      box.addEventListener("change", () => { logChoice[box.dataset.chart] = box.checked; redraw(box.dataset.chart).catch(showError); });
    }
    if (seeds) seeds.addEventListener("change", () => {
      Promise.all([curves ? drawScoreAndLoss() : null, drawRegularizerData()]).catch(showError);
    });
  }

  async function start() {
    bindCopies();
    const form = document.getElementById("heatmap-axes");
    if (form) form.addEventListener("change", () => drawHeatmap().catch(showError));
    const select = document.getElementById("regularizer-key");
    if (select) select.addEventListener("change", () => {
      delete logChoice["chart-regularizer"]; // each metric starts at the scale its own values call for
      drawRegularizer().catch(showError);
    });
    bindCurveToggles();
    try {
      await drawMainCurves();
    } catch (e) {
      showError(e);
    }
    document.body.dataset.ready = "1"; // what the browser tests and the benchmark wait for
    drawLazily();
    if (!final) window.setTimeout(poll, POLL_MS);
  }

  function showError(e) { status.textContent = "could not draw: " + e.message; }

  start();
})();
