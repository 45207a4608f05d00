# RocketStore image: one slim, non-root image for the broker and (later) the operator.
# Base: the official Python slim image. Where no registry is reachable, build a local image
# with this tag from a debootstrap rootfs first (see the broker issue's CI notes).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1

WORKDIR /opt/rocketstore
COPY pyproject.toml README.md ./
COPY store ./store
COPY rocketstore ./rocketstore
RUN python -m pip install --no-compile . \
    && useradd --system --uid 10001 --home-dir /home/rocketmq --create-home rocketmq

USER 10001
WORKDIR /home/rocketmq
# RocketMQ's default storePathRootDir is ~/store; mount the volume there.
VOLUME ["/home/rocketmq/store"]
ENTRYPOINT ["rocketstore"]
CMD ["store", "stats", "--store-dir", "/home/rocketmq/store"]
