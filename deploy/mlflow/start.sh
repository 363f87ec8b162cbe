#!/bin/sh
# Entry point of the MLflow image (deploy/mlflow.Dockerfile): write the basic-auth configuration from the
# environment, then run `mlflow server` with the arguments given (compose's `command`, the Deployment's `args`).
#
#   MLFLOW_BACKEND_STORE_URI        tracking store, read by `mlflow server` itself; also the auth store
#   MLFLOW_AUTH_DATABASE_URI        optional: a separate auth store
#   MLFLOW_AUTH_ADMIN_USERNAME      the admin user created on the first start (read by MLflow >= 3.17)
#   MLFLOW_AUTH_ADMIN_PASSWORD      its password, 12 characters at least (MLflow ships no default any more)
#   MLFLOW_FLASK_SERVER_SECRET_KEY  CSRF key of the auth app; the same on every MLflow replica
#   MLFLOW_AUTH_DEFAULT_PERMISSION  optional, read here only: what users get on experiments they were not
#                                   granted (default NO_PERMISSIONS: one team's runs stay hidden from another)
#   MLFLOW_AUTH_CACHE_TTL_SECONDS   optional, read here only: seconds a verified login is trusted without
#                                   hashing its password again (default 60; 0 hashes on every request, which
#                                   kept one of four server workers 30% busy on a tiny two-trial sweep: the
#                                   trials' logging and the API's reads are each a request). A changed or
#                                   deleted password reaches the server's other workers only after this
#   MLFLOW_SERVER_ENABLE_JOB_EXECUTION  default false here (MLflow's own default is true): the stack runs no
#                                   MLflow server jobs (GenAI scorers, prompt optimisation), and with it on
#                                   every server starts a job runner and Huey consumers that poll for them
#                                   (three more Python processes, about 4% of a core each when idle)
#
# The ini holds the store's URI (so its password): it is written to a private temporary file, never to the image.
set -eu

: "${MLFLOW_BACKEND_STORE_URI:?set MLFLOW_BACKEND_STORE_URI (postgresql+psycopg2://mlflow:PASSWORD@HOST:5432/mlflow; SQLAlchemy 2.1 reads a bare postgresql:// as psycopg 3, not installed)}"
: "${MLFLOW_FLASK_SERVER_SECRET_KEY:?set MLFLOW_FLASK_SERVER_SECRET_KEY}"
: "${MLFLOW_AUTH_ADMIN_USERNAME:?set MLFLOW_AUTH_ADMIN_USERNAME}"
: "${MLFLOW_AUTH_ADMIN_PASSWORD:?set MLFLOW_AUTH_ADMIN_PASSWORD}"

umask 077
config="$(mktemp "${TMPDIR:-/tmp}/basic_auth.XXXXXX.ini")"
python - "$config" <<'PY'
import configparser
import os
import sys

# MLflow reads this file with ConfigParser's default (%-)interpolation: a literal % (URL-encoded passwords)
# must be written as %%.
def raw(value: str) -> str:
    return value.replace("%", "%%")

config = configparser.ConfigParser(interpolation=None)
config["mlflow"] = {
    "default_permission": os.environ.get("MLFLOW_AUTH_DEFAULT_PERMISSION", "NO_PERMISSIONS"),
    "database_uri": raw(os.environ.get("MLFLOW_AUTH_DATABASE_URI") or os.environ["MLFLOW_BACKEND_STORE_URI"]),
    "authorization_function": "mlflow.server.auth:authenticate_request_basic_auth",
    "auth_cache_ttl_seconds": str(int(os.environ.get("MLFLOW_AUTH_CACHE_TTL_SECONDS") or 60)),
}
with open(sys.argv[1], "w", encoding="utf-8") as handle:
    config.write(handle)
PY

export MLFLOW_AUTH_CONFIG_PATH="$config"
export MLFLOW_SERVER_ENABLE_JOB_EXECUTION="${MLFLOW_SERVER_ENABLE_JOB_EXECUTION:-false}"
exec mlflow server "$@"
