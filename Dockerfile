# nanomem's gateway: Telegram and GET /health, state in the /data volume.
# tests/test_docker.py runs this file's install commands in a fresh venv; CI lints it (hadolint).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    LITELLM_LOCAL_MODEL_COST_MAP=True \
    HF_HUB_OFFLINE=1 \
    NANOMEM_HOME=/data \
    NANOMEM_GATEWAY__HOST=0.0.0.0 \
    NANOMEM_GATEWAY__PORT=18790

WORKDIR /app
# Runtime dependencies and the build backend, all pinned by hash: nothing unlocked is fetched.
COPY requirements.lock requirements-build.lock ./
RUN pip install --no-cache-dir --require-hashes -r requirements.lock -r requirements-build.lock
COPY pyproject.toml README.md LICENSE ./
COPY nanomem ./nanomem
COPY channels ./channels
COPY templates ./templates
COPY workspace-template ./workspace-template
RUN pip install --no-cache-dir --no-deps --no-build-isolation . \
    && groupadd --gid 10001 nanomem \
    && useradd --create-home --uid 10001 --gid 10001 nanomem \
    && mkdir -p /data \
    && chown 10001:10001 /data

USER 10001:10001
VOLUME ["/data"]
EXPOSE 18790
HEALTHCHECK --interval=30s --timeout=10s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ['NANOMEM_GATEWAY__PORT'] + '/health', timeout=8)"]
CMD ["nanomem", "gateway"]
