# syntax=docker/dockerfile:1
# The staticfleet image: the operator (with its embedded coordinator) and the members.
#
#   docker build -t staticfleet:0.1.0 .
#   make image     (no Docker engine, no registry: buildah on a Debian base; docs/node.md)
#   docker run --rm staticfleet:0.1.0 --help
#   operator:  staticfleet operator run ...   (the default command; see charts/staticfleet)
#   member:    staticfleet member run ...      (args: ["member", "run", ...] in a pod spec)
#
# Only PyPI is reached at build time; the distribution itself comes from the build context.

ARG PYTHON_IMAGE=python:3.11-slim

# --- build: wheels for staticfleet[operator] and all its dependencies ---------------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# The dependencies first, from pyproject.toml alone and at constraints.txt's versions (the ones
# the tests ran against): this layer stays cached while only the sources change.
COPY pyproject.toml constraints.txt ./
RUN python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; \
print('\n'.join(p['dependencies'] + p['optional-dependencies']['operator']))" >requirements.txt \
 && pip wheel --wheel-dir /wheels -c constraints.txt -r requirements.txt
# Then the distribution itself (pyproject's packages.find: ".", "operator"; the CLI imports
# pipeline/ for `staticfleet spark`, so it is part of every install).
COPY README.md LICENSE ./
COPY coordinator ./coordinator
COPY staticfleet ./staticfleet
COPY operator ./operator
COPY pipeline ./pipeline
RUN pip wheel --no-deps --wheel-dir /wheels . \
 && sha256sum /wheels/*.whl >/wheels.sha256

# --- runtime --------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# A fixed non-root uid/gid (10001), matching the chart's securityContext (runAsUser/fsGroup).
RUN groupadd --system --gid 10001 staticfleet \
 && useradd --system --uid 10001 --gid 10001 --home-dir /home/staticfleet --create-home \
      --shell /usr/sbin/nologin staticfleet

# Install from the wheels only (no index), so the runtime stage needs no network at all.
# The wheels' digests come first: a bind mount is not part of a layer's cache key (buildah
# reused the install layer of older sources), a copied file is, so new wheels mean a new layer.
COPY --from=build /wheels.sha256 /usr/local/share/staticfleet/wheels.sha256
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links /wheels 'staticfleet[operator]' \
 && staticfleet --help >/dev/null

# /data: the coordinator's SQLite store (a PVC or an emptyDir in the chart);
# /certs: the webhook's serving certificate (a Secret in the chart).
RUN mkdir -p /data /certs && chown 10001:10001 /data

USER 10001:10001
WORKDIR /home/staticfleet
# 9092: coordinator HTTP (/metrics, /healthz, /readyz); 9443: admission webhook (TLS);
# 8080: Kopf liveness (/healthz).
EXPOSE 9092 9443 8080

ENTRYPOINT ["staticfleet"]
CMD ["operator", "run"]
