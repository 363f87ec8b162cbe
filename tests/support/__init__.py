"""The integration tests' harness: throwaway infrastructure started and stopped by process group, never by
name. `cluster` (a local Ray head with logical GPUs, `smartune serve` processes), `postgres` (a PostgreSQL
15 cluster in a temp folder) and `teamstack` (team-stack services as processes: MinIO's stand-in,
the MLflow server, Ray and the service). Research code may use it too (research/pool_replay); the product,
`bench` included, never imports it."""
