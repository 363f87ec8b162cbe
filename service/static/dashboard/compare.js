// The compare page: the chosen trials' curves on one chart per metric.
"use strict";

(function () {
  const root = document.getElementById("compare");
  if (!root) return;
  const S = window.smartune;
  const trials = root.dataset.trials.split(",");
  const query = trials.map((t) => "&trial=" + encodeURIComponent(t)).join("");
  const url = "/ui/data/jobs/" + encodeURIComponent(root.dataset.job) + "/curves?key=score&key=train_loss" + query;
  // a few trials: one line each, named in the legend by its cell and seed (no bands)
  const opts = { bands: false, emptyText: "These trials logged no epoch." };
  S.getJSON(url).then((data) => Promise.all([
    S.drawCurves(document.getElementById("chart-compare-score"), data, "score", "dev score", opts),
    S.drawCurves(document.getElementById("chart-compare-loss"), data, "train_loss", "training loss", opts),
  ])).catch((e) => { root.prepend(document.createTextNode("could not draw: " + e.message)); })
    .finally(() => { document.body.dataset.ready = "1"; });
})();
