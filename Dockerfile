# nanomem in a container. Today it runs the terminal chat (`docker run -it`); the gateway
# (Telegram, /health, HEALTHCHECK) becomes the default command when it lands.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    LITELLM_LOCAL_MODEL_COST_MAP=True \
    HF_HUB_OFFLINE=1 \
    NANOMEM_HOME=/data

WORKDIR /app
COPY requirements.lock ./
RUN pip install --require-hashes -r requirements.lock
COPY pyproject.toml README.md LICENSE ./
COPY nanomem ./nanomem
COPY channels ./channels
COPY templates ./templates
COPY workspace-template ./workspace-template
RUN pip install --no-deps . \
    && useradd --create-home --uid 10001 nanomem \
    && mkdir -p /data \
    && chown nanomem:nanomem /data

USER nanomem
VOLUME ["/data"]
CMD ["nanomem", "chat"]
