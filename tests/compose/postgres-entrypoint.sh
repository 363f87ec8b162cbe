#!/bin/bash
# The official postgres image's first start, in short (tests/compose/postgres.Dockerfile): an empty data
# folder gets a cluster whose `postgres` superuser has POSTGRES_PASSWORD, then the init scripts run against
# a server on the Unix socket only; then the server listens on every address with password logins.
set -euo pipefail
: "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    password_file="$(mktemp)"
    printf '%s' "$POSTGRES_PASSWORD" > "$password_file"
    initdb --username=postgres --pwfile="$password_file" --auth-local=trust --auth-host=scram-sha-256 \
        --encoding=UTF8 --locale=C.UTF-8 >/dev/null
    rm -f "$password_file"
    echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
    pg_ctl --wait --silent -o "-c listen_addresses=''" start
    for script in /docker-entrypoint-initdb.d/*.sh; do
        [ -e "$script" ] && bash "$script"
    done
    pg_ctl --wait --silent --mode=fast stop
fi
exec postgres -c listen_addresses='*'
