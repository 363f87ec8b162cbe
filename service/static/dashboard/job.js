// The job page: curves (polled while the sweep runs), heat map, parallel coordinates, regulariser curves,
// the copy buttons. Data from /ui/data/jobs/<id>/... (downsampled on the server).
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

  function bestTrial(trials) {
    let top = null, topValue = -Infinity;
    for (const t of trials) {
      for (const p of t.curves.score || []) if (p[1] > topValue) { topValue = p[1]; top = t.trial_id; }
    }
    return top;
  }

  async function drawMainCurves() {
    const data = await S.getJSON(base + "/curves?key=score&key=train_loss&max_points=200");
    best = bestTrial(data.trials);
    await Promise.all([
      S.drawCurves(document.getElementById("chart-score"), data.trials, "score", "dev " + root.dataset.metric, best),
      S.drawCurves(document.getElementById("chart-loss"), data.trials, "train_loss", "training loss", best),
    ]);
    status.textContent = data.points + " points" + (final ? "" : " · updating every " + POLL_MS / 1000 + " s");
  }

  async function drawHeatmap() {
    const form = document.getElementById("heatmap-axes");
    const el = document.getElementById("chart-heatmap");
    if (!form || !el) return;
    const x = form.elements.x.value, y = form.elements.y.value;
    if (x === y) { el.dataset.cells = "0"; el.textContent = "Choose two different axes."; return; }
    const h = await S.getJSON(base + "/heatmap?x=" + encodeURIComponent(x) + "&y=" + encodeURIComponent(y));
    const text = h.z.map((row, i) => row.map((m, j) =>
      m === null ? "no score" : m.toFixed(4) + "<br>n=" + h.n[i][j] + " sd=" + h.std[i][j].toFixed(4)));
    let cells = 0;
    h.n.forEach((row) => row.forEach((n) => { if (n > 0) cells += 1; }));
    el.dataset.cells = String(cells);
    await Plotly.react(el, [{
      type: "heatmap", x: h.x_values, y: h.y_values, z: h.z, text, texttemplate: "%{text}",
      hovertemplate: x + "=%{x}<br>" + y + "=%{y}<br>%{text}<extra></extra>", colorscale: "Viridis",
      xgap: 2, ygap: 2, colorbar: { title: { text: root.dataset.metric } },
    }], { margin: { l: 90, r: 20, t: 20, b: 60 }, height: 360, xaxis: { type: "category", title: { text: x } },
      yaxis: { type: "category", title: { text: y } } }, S.config);
  }

  async function drawParallel() {
    const el = document.getElementById("chart-parallel");
    if (!el) return;
    const p = await S.getJSON(base + "/parallel");
    const dims = p.dimensions.map((d) => {
      const dim = { label: d.label, values: d.values };
      if (d.ticks) { dim.tickvals = d.ticks.map((_, i) => i); dim.ticktext = d.ticks; }
      return dim;
    });
    const metric = p.dimensions[p.dimensions.length - 1].values;
    el.dataset.lines = String(metric.length);
    await Plotly.react(el, [{ type: "parcoords", dimensions: dims,
      line: { color: metric, colorscale: "Viridis", showscale: true } }],
      { margin: { l: 70, r: 70, t: 40, b: 20 }, height: 360 }, S.config);
  }

  async function drawRegularizer() {
    const select = document.getElementById("regularizer-key");
    const el = document.getElementById("chart-regularizer");
    if (!select || !el) return;
    const key = select.value;
    const data = await S.getJSON(base + "/curves?key=" + encodeURIComponent(key) + "&max_points=200");
    await S.drawCurves(el, data.trials, key, key, best);
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
      await drawMainCurves();
      if (drawn.has("chart-regularizer")) await drawRegularizer();
      if (nowFinal) { final = true; status.textContent = "finished"; return; }
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

  async function start() {
    bindCopies();
    const form = document.getElementById("heatmap-axes");
    if (form) form.addEventListener("change", () => drawHeatmap().catch(showError));
    const select = document.getElementById("regularizer-key");
    if (select) select.addEventListener("change", () => drawRegularizer().catch(showError));
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
