# syntax=docker/dockerfile:1
# The kubeforge operator image: `kubeforge run` (kopf) as a non-root user.
#
#   docker build -t ghcr.io/kubeforge/kubeforge:0.1.0 .
#
# The chart (charts/kubeforge) runs it with command ["kubeforge"] and args ["run", ...] and a
# read-only root filesystem (only /tmp is writable), as UID/GID 65532 (Pod Security "restricted").

# Pinned tag. For reproducible builds pin the digest as well:
#   FROM python:3.11.11-slim-bookworm@sha256:<digest>   (docker buildx imagetools inspect python:3.11.11-slim-bookworm)
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
RUN python -m venv /opt/kubeforge
COPY pyproject.toml README.md ./
COPY operator/ ./operator/
RUN /opt/kubeforge/bin/pip install --no-cache-dir .

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="kubeforge" \
      org.opencontainers.image.description="Kubernetes operator for GPU workloads (kopf)" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/kubeforge/kubeforge"
ENV PATH=/opt/kubeforge/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN groupadd --system --gid 65532 kubeforge \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin kubeforge
COPY --from=build /opt/kubeforge /opt/kubeforge
USER 65532:65532
# 8080: Prometheus /metrics (--metrics-port); 8081: liveness GET /healthz (--health-address).
EXPOSE 8080 8081
ENTRYPOINT ["kubeforge"]
CMD ["run"]
