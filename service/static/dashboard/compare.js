// The compare page: the chosen trials' curves on one chart per metric.
"use strict";

(function () {
  const root = document.getElementById("compare");
  if (!root) return;
  const S = window.smartune;
  const trials = root.dataset.trials.split(",");
  const query = trials.map((t) => "&trial=" + encodeURIComponent(t)).join("");
  const url = "/ui/data/jobs/" + encodeURIComponent(root.dataset.job) + "/curves?key=score&key=train_loss" + query;
  S.getJSON(url).then((data) => Promise.all([
    S.drawCurves(document.getElementById("chart-compare-score"), data.trials, "score", "dev score", null),
    S.drawCurves(document.getElementById("chart-compare-loss"), data.trials, "train_loss", "training loss", null),
  ])).then(() => {
    // a legend helps with a handful of trials
    for (const id of ["chart-compare-score", "chart-compare-loss"]) Plotly.relayout(id, { showlegend: true });
  }).catch((e) => { root.prepend(document.createTextNode("could not draw: " + e.message)); })
    .finally(() => { document.body.dataset.ready = "1"; });
})();
