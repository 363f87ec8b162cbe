"""What a job will cost before it runs, and what a team may still spend (docs/architecture.md, "Estimates
and budgets"): the calibration table of measured step costs (`calibration`, refreshed from finished trials
by `refresh`), the examples a trial trains on (`sizes`), the plan of a spec (`estimate`), a trial's peak
accelerator memory (`memory`, from a model's `shapes`, with `lora_memory` for LoRA trials), and the teams'
device-hour budgets (`budget`). Plain functions on data and a session: no torch, Ray or MLflow.

May import the store, the engine's pure parts (`scheduler`, `pool`, `tracking`'s types) and the plain
helpers at the service's root; never the HTTP edge."""
