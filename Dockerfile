# RocketStore image: one slim, non-root image whose entrypoint runs the broker
# (`rocketstore operator` runs from the same image).
# Base: the official Python slim image. Where no registry is reachable, build a local image
# with this tag from a debootstrap rootfs first.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1

WORKDIR /opt/rocketstore
COPY pyproject.toml README.md ./
# every part of the `rocketstore` namespace that pyproject.toml maps must be copied
COPY common/rocketstore ./common/rocketstore
COPY remoting/rocketstore ./remoting/rocketstore
COPY store/rocketstore ./store/rocketstore
COPY client/rocketstore ./client/rocketstore
COPY broker_image/rocketstore ./broker_image/rocketstore
COPY cli/rocketstore ./cli/rocketstore
COPY operator/rocketstore ./operator/rocketstore
COPY pipeline/rocketstore ./pipeline/rocketstore
COPY pipeline/pyspark_rocketstore ./pipeline/pyspark_rocketstore
# Optional package-index settings for the pip install below, for networks that need them
# (`docker build --build-arg PIP_INDEX_URL=...`); empty means pip's defaults (PyPI). A proxy goes
# in Docker's predefined HTTP_PROXY/HTTPS_PROXY/NO_PROXY build args. Build-arg values show in
# `docker history`: no credentials here.
ARG PIP_INDEX_URL=
ARG PIP_EXTRA_INDEX_URL=
ARG PIP_TRUSTED_HOST=
RUN python -m pip install --no-compile . \
    && useradd --system --uid 10001 --home-dir /home/rocketmq --create-home rocketmq

USER 10001
WORKDIR /home/rocketmq
# RocketMQ's default storePathRootDir is ~/store; mount the volume there.
VOLUME ["/home/rocketmq/store"]
# remoting, embedded name server, HTTP (/metrics, /healthz, /readyz)
EXPOSE 10911 9876 10925
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s \
    CMD ["python", "-c", "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:10925/readyz', timeout=2); sys.exit(0)"]
ENTRYPOINT ["rocketstore"]
CMD ["broker"]
