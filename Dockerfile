# syntax=docker/dockerfile:1
# The kubeforge operator image: `kubeforge run` (kopf) as a non-root user.
#
#   docker build -t ghcr.io/kubeforge/kubeforge:0.1.0 .
#
# Without Docker, hack/build-image.sh builds the same image from Debian's archive and PyPI with
# mmdebstrap and umoci (`make image`): Debian bookworm, Debian's python3, a venv at /opt/kubeforge
# with the project's wheel and its dependencies, and the same user, entrypoint, cmd, ports, env
# and labels. tests/test_image.py checks that the two agree.
#
# The chart (charts/kubeforge) runs it with command ["kubeforge"] and args ["run", ...] and a
# read-only root filesystem (only /tmp is writable), as UID/GID 65532 (Pod Security "restricted").

# Pinned suite. For reproducible builds pin the digest as well:
#   FROM debian:bookworm-slim@sha256:<digest>   (docker buildx imagetools inspect debian:bookworm-slim)
ARG BASE_IMAGE=debian:bookworm-slim

FROM ${BASE_IMAGE} AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv \
 && rm -rf /var/lib/apt/lists/*
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
RUN python3 -m venv /opt/kubeforge
COPY pyproject.toml README.md ./
COPY operator/ ./operator/
# Unchecked-hash .pyc files: the root filesystem is read-only and the image immutable, so Python
# never compiles at start-up. pip itself does not stay in the image.
RUN /opt/kubeforge/bin/pip install --no-cache-dir --no-compile . \
 && /opt/kubeforge/bin/pip uninstall -y -q pip setuptools \
 && /opt/kubeforge/bin/python -m compileall -q -j 0 --invalidation-mode unchecked-hash /opt/kubeforge/lib

FROM ${BASE_IMAGE}
LABEL org.opencontainers.image.title="kubeforge" \
      org.opencontainers.image.description="Kubernetes operator for GPU workloads (kopf)" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/kubeforge/kubeforge"
# Debian's python3 (the venv's interpreter is a link to /usr/bin/python3); no apt lists, no docs.
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 ca-certificates netbase \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /usr/share/doc/*/changelog* /usr/share/man/*
ENV PATH=/opt/kubeforge/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN groupadd --system --gid 65532 kubeforge \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin kubeforge
COPY --from=build /opt/kubeforge /opt/kubeforge
USER 65532:65532
# 8080: Prometheus /metrics (--metrics-port); 8081: liveness GET /healthz (--health-address);
# 8443: the workers' HTTPS status endpoint (--status-address).
EXPOSE 8080 8081 8443
ENTRYPOINT ["kubeforge"]
CMD ["run"]
