#!/bin/bash
# Creates the stack's two databases and their owners on the first start of an empty data volume (the
# postgres image runs /docker-entrypoint-initdb.d/* only then): `smartune` (the job store) and `mlflow`
# (MLflow's tracking and auth store). Each user owns its database and nothing else.
#
# The passwords come from the environment (SMARTUNE_DB_PASSWORD, MLFLOW_DB_PASSWORD). They are set here once:
# changing them in .env later needs `ALTER ROLE ... PASSWORD ...` too (docs/deployment.md, "Rotating secrets").
set -euo pipefail

: "${SMARTUNE_DB_PASSWORD:?SMARTUNE_DB_PASSWORD is not set}"
: "${MLFLOW_DB_PASSWORD:?MLFLOW_DB_PASSWORD is not set}"

# psql variables (:'name') quote the passwords as SQL literals, whatever characters they hold.
psql --set=ON_ERROR_STOP=1 --username "${POSTGRES_USER:-postgres}" --dbname postgres \
    --set=smartune_password="$SMARTUNE_DB_PASSWORD" \
    --set=mlflow_password="$MLFLOW_DB_PASSWORD" <<'SQL'
CREATE ROLE smartune LOGIN PASSWORD :'smartune_password';
CREATE DATABASE smartune OWNER smartune;
REVOKE ALL ON DATABASE smartune FROM PUBLIC;

CREATE ROLE mlflow LOGIN PASSWORD :'mlflow_password';
CREATE DATABASE mlflow OWNER mlflow;
REVOKE ALL ON DATABASE mlflow FROM PUBLIC;
SQL
