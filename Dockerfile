# One raftlog node; docker-compose.yml runs three of these.
FROM python:3.11-slim

WORKDIR /opt/raftlog
COPY pyproject.toml README.md ./
COPY raftlog ./raftlog
COPY kafka_api ./kafka_api
COPY epoch ./epoch
COPY analytics ./analytics
RUN pip install --no-cache-dir . \
    && useradd --system --home-dir /var/lib/raftlog raftlog \
    && mkdir -p /var/lib/raftlog /etc/raftlog \
    && chown raftlog /var/lib/raftlog

USER raftlog
VOLUME /var/lib/raftlog
EXPOSE 9092 10092 11092
CMD ["raftlog", "serve", "--config", "/etc/raftlog/node.toml"]
