# The commands a person types. Everything installs into .venv from the project's own files.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install demo test test-fast lint bench clean kafka kafka-up java-peer

install: $(STAMP)

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) on PATH"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,demo,operator,spark,kafka]'
	touch $(STAMP)

demo: install
	$(VENV)/bin/staticfleet demo

test: install kafka java-peer
	$(PY) -m pytest -q

test-fast: install
	$(PY) -m pytest -q -m "not slow and not crash and not kafka"

lint: install chart-lint
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy coordinator staticfleet tests bench scripts pipeline e2e operator/staticfleet_operator

# crds/ is a directory too: phony, or make would call it up to date.
.PHONY: crds
crds: install
	$(VENV)/bin/staticfleet crds --output-dir crds
	$(MAKE) --no-print-directory chart-crds

bench: install kafka
	$(PY) -m bench.run

# --- Apache Kafka (kafka/pom.xml) -----------------------------------------------------------
# The broker's jars resolved by Maven into build/kafka/libs once; the tests marked `kafka` and
# `make kafka-up` run a single KRaft node on loopback (staticfleet/kafka/broker.py).
kafka:
	@scripts/install-kafka.sh

kafka-up: install kafka
	$(PY) -m staticfleet.kafka.broker up

# The Java peer (java/consumer-peer): a KafkaConsumer from kafka-clients, the reference client.
java-peer:
	@scripts/build-java-peer.sh

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache

# --- Helm chart (charts/staticfleet) -------------------------------------------------------
# helm is built from its Go module once into build/bin/helm (scripts/build-helm.sh) and reused.
HELM_VERSION ?= v3.21.4
HELM := build/bin/helm
CHART := charts/staticfleet

.PHONY: helm chart-crds chart-lint

helm:
	@HELM_VERSION=$(HELM_VERSION) scripts/build-helm.sh

# The chart's CRDs are copies of crds/ (generated from the pydantic models); a test fails on
# drift. kopf-peerings.yaml (Kopf's peering CRDs) belongs to the chart alone.
chart-crds:
	@mkdir -p $(CHART)/crds
	find $(CHART)/crds -name '*.yaml' ! -name kopf-peerings.yaml -delete
	cp crds/*.yaml $(CHART)/crds/

chart-lint: install helm
	$(HELM) lint --strict $(CHART)
	$(HELM) lint --strict $(CHART) -f $(CHART)/ci/full-values.yaml
	$(HELM) template sf $(CHART) --namespace staticfleet-system --include-crds | $(PY) scripts/check_manifests.py --profile default
	$(HELM) template sf $(CHART) --namespace staticfleet-system --include-crds -f $(CHART)/ci/full-values.yaml | $(PY) scripts/check_manifests.py --profile full

# --- End to end (e2e/) ---------------------------------------------------------------------
# A real control plane (etcd, kube-apiserver, kube-controller-manager, kubectl) built once from
# the Go module proxy into build/e2e/bin, the node agent in place of a kubelet, the chart
# installed with the helm above. See e2e/README.md.
E2E_PYTEST := $(PY) -m pytest -q -o testpaths=e2e --timeout 1500 -p no:cacheprovider

.PHONY: e2e e2e-build e2e-kind

e2e-build: helm
	@e2e/build.sh

e2e: install e2e-build
	$(E2E_PYTEST) e2e

# The same scenarios on a kind cluster with the image built from the Dockerfile (needs a
# Docker engine; kind itself is built from its Go module).
e2e-kind: install helm
	@e2e/kind.sh $(E2E_PYTEST) e2e
