# One raftlog node; docker-compose.yml runs three of these.
#
# Build arguments, all optional, for a build that cannot reach Docker Hub or the package
# index (make compose-test sets them; tests/compose/README.md):
#   BASE_IMAGE  an image with Python 3.11 and pip (default python:3.11-slim)
#   WHEELS      a folder in that image holding a wheel for every dependency (pip wheel);
#               pip then installs from it alone, with no index
#   COMPILED    1 (default): the build stage compiles the hot modules with mypyc (it installs
#               gcc and libc6-dev where the base has no gcc, and python3-dev where it has no
#               Python.h, from the base's apt: a base that has both needs no apt, as the one
#               make compose-test builds offline; and mypy, at pyproject.toml's pin as
#               the venv's (its mypyc extra), from the index or WHEELS); if that fails the
#               image runs pure Python ("mypyc: compile failed" in the build).
#               0: pure Python, no compiler needed.
ARG BASE_IMAGE=python:3.11-slim

FROM ${BASE_IMAGE} AS build
ARG WHEELS=
ARG COMPILED=1
WORKDIR /opt/raftlog
COPY pyproject.toml README.md compiled_modules.txt ./
COPY raftlog ./raftlog
COPY kafka_api ./kafka_api
COPY epoch ./epoch
COPY analytics ./analytics
COPY raftlog_app ./raftlog_app
COPY consume_proxy ./consume_proxy
# mypyc type-checks what it compiles, so the dependencies go in too (this stage only).
RUN if [ "$COMPILED" = 1 ]; then \
        pkgs=; \
        command -v gcc >/dev/null || pkgs="gcc libc6-dev"; \
        python -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(sysconfig.get_paths()["include"] + "/Python.h"))' \
            || pkgs="$pkgs python3-dev"; \
        { { [ -z "$pkgs" ] || { apt-get update -qq \
              && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $pkgs; }; } \
          && pip install --no-cache-dir ${WHEELS:+--no-index --find-links "$WHEELS"} '.[mypyc]' \
          && sha256sum $(cat compiled_modules.txt) > compiled.sha256.new \
          && mypyc --no-warn-unused-configs $(cat compiled_modules.txt) > mypyc.log 2>&1 \
          && mv compiled.sha256.new compiled.sha256; } \
        || { echo "mypyc: compile failed: the image runs pure Python"; tail -5 mypyc.log 2>/dev/null; \
             find raftlog kafka_api -name '*.cpython-*.so' -delete; rm -f ./*__mypyc.*.so; }; \
    fi; \
    rm -rf build mypyc.log compiled.sha256.new ./*.egg-info

FROM ${BASE_IMAGE}
ARG WHEELS=
WORKDIR /opt/raftlog
COPY --from=build /opt/raftlog ./
# The package's dependencies and the `raftlog` command; the modules themselves run from
# /opt/raftlog (first on the path), where the build stage put the compiled extensions
# beside them and compiled.sha256 (raftlog/compiled.py).
RUN pip install --no-cache-dir ${WHEELS:+--no-index --find-links "$WHEELS"} . \
    && useradd --system --home-dir /var/lib/raftlog raftlog \
    && mkdir -p /var/lib/raftlog /etc/raftlog \
    && chown raftlog /var/lib/raftlog \
    && rm -rf build ./*.egg-info
ENV PYTHONPATH=/opt/raftlog

USER raftlog
VOLUME /var/lib/raftlog
EXPOSE 9092 10092 11092
CMD ["raftlog", "serve", "--config", "/etc/raftlog/node.toml"]
