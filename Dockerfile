# One raftlog node; docker-compose.yml runs three of these.
#
# Build arguments, both optional, for a build that cannot reach Docker Hub or the package
# index (make compose-test sets both; tests/compose/README.md):
#   BASE_IMAGE  an image with Python 3.11 and pip (default python:3.11-slim)
#   WHEELS      a folder in that image holding a wheel for every dependency (pip wheel);
#               pip then installs from it alone, with no index
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}
ARG WHEELS=

WORKDIR /opt/raftlog
COPY pyproject.toml README.md ./
COPY raftlog ./raftlog
COPY kafka_api ./kafka_api
COPY epoch ./epoch
COPY analytics ./analytics
COPY raftlog_app ./raftlog_app
COPY consume_proxy ./consume_proxy
RUN pip install --no-cache-dir ${WHEELS:+--no-index --find-links "$WHEELS"} . \
    && useradd --system --home-dir /var/lib/raftlog raftlog \
    && mkdir -p /var/lib/raftlog /etc/raftlog \
    && chown raftlog /var/lib/raftlog

USER raftlog
VOLUME /var/lib/raftlog
EXPOSE 9092 10092 11092
CMD ["raftlog", "serve", "--config", "/etc/raftlog/node.toml"]
