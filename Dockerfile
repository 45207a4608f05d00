# RocketStore image: one slim, non-root image whose entrypoint runs the broker
# (`rocketstore operator` runs from the same image).
#
# Two stages on the same base, the official Python slim image. The build stage compiles the
# native hot path (native/, Rust through PyO3) into a wheel with the Rust toolchain Debian keeps
# current in its stable releases for building browsers (rustc-web, cargo-web: 1.96 from
# bookworm-security or trixie; the plain rustc is bookworm's 1.63 and trixie's 1.85, older than the
# crate's code needs). The runtime stage installs that wheel: no Rust toolchain, C compiler or
# source tree in it. Same interpreter and C library in both, so the extension built in one loads in
# the other.
# Where no registry is reachable, build a local image with the base's tag from a debootstrap rootfs
# first (tests/image/build_base_image.sh).

# Optional package-index settings for the pip runs below, for networks that need them
# (`docker build --build-arg PIP_INDEX_URL=...`); empty means pip's defaults (PyPI). A proxy goes
# in Docker's predefined HTTP_PROXY/HTTPS_PROXY/NO_PROXY build args (apt, pip and cargo all read
# them). Build-arg values show in `docker history`: no credentials here.
ARG PIP_INDEX_URL=
ARG PIP_EXTRA_INDEX_URL=
ARG PIP_TRUSTED_HOST=

FROM python:3.11-slim AS build
ARG PIP_INDEX_URL
ARG PIP_EXTRA_INDEX_URL
ARG PIP_TRUSTED_HOST
# rustc-web brings gcc, binutils and libc6-dev (rustc links through cc). No python3-dev: a PyO3
# extension module links no libpython.
RUN apt-get update \
    && apt-get install -y --no-install-recommends rustc-web cargo-web \
    && rm -rf /var/lib/apt/lists/* \
    && rustc --version && cargo --version
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    CARGO_HOME=/cargo
WORKDIR /src
# The crates first, in a layer of their own: a source change rebuilds without downloading them.
# The stand-in lib.rs is replaced by the real one below.
COPY native/Cargo.toml native/Cargo.lock ./native/
RUN mkdir native/src && touch native/src/lib.rs \
    && cargo fetch --locked --manifest-path native/Cargo.toml \
    && rm -r native/src
COPY native/src ./native/src
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
# The extension is optional in pyproject.toml: a failed cargo build still yields a wheel, a
# pure-Python one, with cargo's output swallowed. So insist on the extension being in the wheel,
# and when it is not, build the crate once more to show why.
# CARGO_NET_OFFLINE: the crates come from the layer above, as Cargo.lock pins them. The target
# directory goes (no later build could reuse it: each starts from the layer before this one).
ENV CARGO_NET_OFFLINE=true
RUN python -m pip wheel --no-deps --wheel-dir /wheels . \
    && if ! python -c "import glob, sys, zipfile; \
names = zipfile.ZipFile(glob.glob('/wheels/rocketstore-*.whl')[0]).namelist(); \
sys.exit(not any(n.startswith('rocketstore/common/_native.') for n in names))"; then \
        echo "the wheel has no native extension; the cargo build says why:" >&2; \
        cargo build --release --manifest-path native/Cargo.toml; \
        exit 1; \
    fi \
    && rm -rf native/target

FROM python:3.11-slim
ARG PIP_INDEX_URL
ARG PIP_EXTRA_INDEX_URL
ARG PIP_TRUSTED_HOST

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1

COPY --from=build /wheels /tmp/wheels
# With the `operator` extra (kopf, kubernetes): the same image runs `rocketstore operator`.
# The last command fails the build if the image would run the pure-Python hot path (the
# extension does not load here, say).
RUN set -- /tmp/wheels/rocketstore-*.whl \
    && python -m pip install --no-compile "$1[operator]" \
    && rm -rf /tmp/wheels \
    && useradd --system --uid 10001 --home-dir /home/rocketmq --create-home rocketmq \
    && python -c "from rocketstore.common import native; \
raise SystemExit(0 if native.IMPLEMENTATION == 'native' else 'image would run the pure-Python hot path: ' + native.REASON)"

USER 10001
WORKDIR /home/rocketmq
# RocketMQ's default storePathRootDir is ~/store; mount the volume there.
VOLUME ["/home/rocketmq/store"]
# remoting, embedded name server, HTTP (/metrics, /healthz, /readyz), gRPC v2 (RocketMQ 5.x clients)
EXPOSE 10911 9876 10925 8081
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s \
    CMD ["python", "-c", "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:10925/readyz', timeout=2); sys.exit(0)"]
ENTRYPOINT ["rocketstore"]
CMD ["broker"]
