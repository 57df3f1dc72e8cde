# The epoch audit as a container: raftlog with its audit extra (PySpark) and a Java runtime,
# so that `docker-compose --profile audit run --rm audit` writes the report of the compose
# cluster into the audit-reports volume with no Spark or Java on the host.
# Build arguments as in the node's Dockerfile (BASE_IMAGE, WHEELS).
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}
ARG WHEELS=

# Spark needs Java 17 (a base image that has one already is used as it is).
RUN command -v java >/dev/null 2>&1 || { \
        mkdir -p /usr/share/man/man1 \
        && apt-get update \
        && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
            openjdk-17-jre-headless \
        && rm -rf /var/lib/apt/lists/*; }

WORKDIR /opt/raftlog
COPY pyproject.toml README.md ./
COPY raftlog ./raftlog
COPY kafka_api ./kafka_api
COPY epoch ./epoch
COPY analytics ./analytics
COPY raftlog_app ./raftlog_app
COPY consume_proxy ./consume_proxy
RUN pip install --no-cache-dir ${WHEELS:+--no-index --find-links "$WHEELS"} '.[audit]' \
    && useradd --system --home-dir /reports raftlog \
    && mkdir -p /reports/audit \
    && chown -R raftlog /reports

USER raftlog
# `raftlog audit` writes to audit/<UTC date and time>/ under here: the compose file mounts
# the audit-reports volume at /reports/audit.
WORKDIR /reports
CMD ["raftlog", "audit", "--help"]
