# PostgreSQL 15 from Debian's packages, for the compose stack test only: it stands in for the public
# `postgres:15` image where no image registry is reachable (tests/compose/override.yml). It keeps that
# image's interface as docker-compose.yml uses it: POSTGRES_PASSWORD, the scripts of
# /docker-entrypoint-initdb.d run on the first start of an empty data volume, the data in
# /var/lib/postgresql/data, `pg_isready` on the PATH.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
RUN apt-get update \
    && apt-get install -y --no-install-recommends postgresql-15 \
    && rm -rf /var/lib/apt/lists/* \
    && install --directory --owner=postgres --group=postgres --mode=0700 /var/lib/postgresql/data \
    && install --directory /docker-entrypoint-initdb.d
COPY --chmod=0755 postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint
ENV PATH=/usr/lib/postgresql/15/bin:$PATH \
    PGDATA=/var/lib/postgresql/data
USER postgres
EXPOSE 5432
ENTRYPOINT ["postgres-entrypoint"]
