"""The paper's reproduction campaign (issue 12): jobs submitted over REST, results read from MLflow.

`plan` holds the campaign as data, `run` submits it (resumable through idempotency keys), `collect`
turns the MLflow records into `research/results/paper_ablation.json`, `report` writes docs/reproduction.md.
"""
