"""A team's disk (docs/architecture.md, "Storage quotas and checkpoint retention"): what it keeps, measured
(`trees`: a local folder or an S3 prefix as files and sizes; `measure`: the engine's periodic measurement of
each team's Tune checkpoints and local MLflow artifacts), its quota checked at upload and submission
(`usage`, `uploads`), and the retention of finished jobs' checkpoints (`retention`), run by the engine
(`keeper`). Plain functions on data, folders and a session: no torch, Ray or MLflow.

May import the store, the dataset store (`service.datasets`), the settings and plain helpers at the
service's root and `worker.contract`; never the engine or the HTTP edge (the engine calls `keeper`)."""
