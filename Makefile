# The commands a person types. Everything installs into .venv from the project's own files.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The extras `make install` installs (pyproject.toml); EXTRAS= installs the base package only.
EXTRAS ?= dev,demo,operator,spark,kafka

.PHONY: help install demo demo-kafka test test-fast lint bench clean kafka kafka-up java-peer

help: ## list the targets, one line each
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/^([a-zA-Z0-9_-]+):.*## (.*)$$/\1\t\2/' | expand -t 14

install: $(STAMP) ## create .venv and install the project with every extra (once; again when pyproject.toml changes)

# setuptools' notice that an editable install is editable is silenced (it says nothing
# a developer must act on); any other build warning is shown.
# constraints.txt pins every dependency at the version the tests ran against (make constraints).
$(STAMP): pyproject.toml constraints.txt
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) on PATH"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	PYTHONWARNINGS='ignore:Editable installation' $(PY) -m pip install --quiet -c constraints.txt -e '.$(if $(EXTRAS),[$(EXTRAS)])'
	touch $(STAMP)

# The project's own modules compiled to bytecode (__pycache__) before the commands that start
# many processes: the editable install leaves them uncompiled, and where PYTHONDONTWRITEBYTECODE
# is set (as where CI runs) every process would compile them again at each start, about
# 0.05 CPU-s per member process (docs/performance.md, "What starting a process costs").
# Python still reads what this writes; a source changed since is compiled in memory as before.
.PHONY: bytecode
bytecode: install ## compile the project's modules into __pycache__ (make test, demo and e2e do it first)
	@$(PY) -m compileall -q -j 0 coordinator staticfleet operator/staticfleet_operator pipeline bench e2e tests scripts

# After changing a dependency in pyproject.toml: install it unconstrained, test, then re-pin.
.PHONY: constraints
constraints: ## rewrite constraints.txt from what .venv holds of pyproject's dependencies
	$(PY) scripts/freeze_constraints.py --output constraints.txt

demo: install bytecode ## the local fleet demo: coordinator + 6 members, seven scenarios (docs/demo.md)
	$(VENV)/bin/staticfleet demo

demo-kafka: install kafka ## the demo on our coordinator, then on a real Kafka broker, side by side
	$(VENV)/bin/staticfleet demo --coordinator both

# Parallel workers (pytest-xdist): the suite waits on processes, brokers and JVMs more than it
# computes; tests sharing a long-lived fixture stay on one worker (tests/conftest.py).
# The 25 slowest are listed at the end: where the suite's minutes go (issue 26).
TEST_WORKERS ?= 3
test: install bytecode java-assignors kafka java-peer soak-tools ## the whole test suite on TEST_WORKERS workers (builds the Kafka broker's jars and the Java peers once)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --durations=25

# The fault soak (docs/soak.md): not in CI (30 minutes); its 35 s smoke is in make test, as is
# the Kafka variant's (45-80 s), and the operator variant's is in make e2e.
# SOAK_COORDINATOR=kafka puts the groups on a Kafka broker of the soak's own (the jars from
# the kafka target); SOAK_COORDINATOR=operator on `operator run` beside a control plane of
# its own (the binaries from e2e-build), with the operator's and the API server's kills.
SOAK_SEED ?= 25
SOAK_DURATION ?= 30m
SOAK_COORDINATOR ?= embedded
SOAK_REPORT = bench/results/soak$(if $(filter-out embedded,$(SOAK_COORDINATOR)),_$(SOAK_COORDINATOR)).json
SOAK_ARGS = --seed $(SOAK_SEED) --duration $(SOAK_DURATION) --report $(SOAK_REPORT)
.PHONY: soak soak-tools
# As root the soak's network and disk kinds run (namespaces, iptables, tmpfs): iptables is
# installed from Debian when absent; as another user they are left out, and the soak says so.
soak-tools: ## install iptables (Debian) for the soak's network kinds, as root (else nothing)
	@if [ "$$(id -u)" = 0 ]; then NAME="soak packages" scripts/install-debian-packages.sh iptables=iptables; fi
soak: install soak-tools $(if $(filter kafka,$(SOAK_COORDINATOR)),kafka) $(if $(filter operator,$(SOAK_COORDINATOR)),e2e-build) ## the seeded fault soak (SOAK_SEED, SOAK_DURATION=30m, SOAK_COORDINATOR=embedded|kafka|operator) -> bench/results/soak[_kafka|_operator].json
ifeq ($(SOAK_COORDINATOR),operator)
	nice -n 10 $(PY) -m e2e.soak_operator $(SOAK_ARGS)
else
	nice -n 10 $(VENV)/bin/staticfleet soak --coordinator $(SOAK_COORDINATOR) $(SOAK_ARGS)
endif

test-fast: install bytecode java-assignors ## the tests without the slow process-level, crash and Kafka broker tests
	$(PY) -m pytest -q -m "not slow and not crash and not kafka"

lint: install chart-lint ## ruff, ruff format --check, mypy --strict, and chart-lint
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy coordinator staticfleet tests bench scripts pipeline e2e operator/staticfleet_operator

# crds/ is a directory too: phony, or make would call it up to date.
.PHONY: crds
crds: install ## regenerate crds/ (and the chart's copy) from the pydantic models
	$(VENV)/bin/staticfleet crds --output-dir crds
	$(MAKE) --no-print-directory chart-crds

bench: install java-assignors kafka loadgen ## benchmarks -> bench/results/*.json (docs/performance.md)
	$(PY) -m bench.run

# The capacity benchmark's load generator (bench/loadgen: the Go standard library, and
# franz-go's kmsg for its Kafka-protocol fleet mode, pinned in go.mod/go.sum and fetched by
# `go build` from the Go module proxy), built with the machine's Go into build/bin/loadgen.
.PHONY: loadgen
loadgen: build/bin/loadgen ## the Go load generator of the capacity benchmark (bench/capacity.py)

build/bin/loadgen: $(wildcard bench/loadgen/*.go) bench/loadgen/go.mod bench/loadgen/go.sum
	@mkdir -p build/bin
	cd bench/loadgen && go build -o ../../build/bin/loadgen .

# --- Apache Kafka (java/broker/pom.xml) -----------------------------------------------------------
# The broker's jars resolved by Maven into build/kafka/libs once; the tests marked `kafka` and
# `make kafka-up` run a single KRaft node on loopback (staticfleet/kafka/broker.py).
kafka: ## resolve the Kafka 4.4.0 broker's jars (Maven) into build/kafka/libs, once
	@scripts/install-kafka.sh

kafka-up: install kafka ## a Kafka broker on loopback for manual use (SECURED=1: SASL_SSL, SSL, ACLs; Ctrl-C stops it)
	$(PY) -m staticfleet.kafka.broker up $(if $(SECURED),--secured)

# The Java peer (java/consumer-peer): a KafkaConsumer from kafka-clients, the reference client.
java-peer: ## build the Java KafkaConsumer peer (Maven) into build/
	@scripts/build-java-peer.sh

clean: ## remove .venv, build/ and the caches
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache

# --- Helm chart (charts/staticfleet) -------------------------------------------------------
# helm is built from its Go module once into build/bin/helm (scripts/build-helm.sh) and reused.
HELM_VERSION ?= v3.21.4
HELM := build/bin/helm
CHART := charts/staticfleet

.PHONY: helm chart-crds chart-lint promtool kubeconform

helm: ## build helm from its Go module into build/bin/helm (once)
	@HELM_VERSION=$(HELM_VERSION) scripts/build-helm.sh

# promtool (the chart's alert unit tests) and kubeconform (manifest schemas), each pinned by a
# go.mod under tools/ and built once into build/bin.
promtool: ## build promtool (tools/promtool/go.mod) into build/bin/promtool (once)
	@scripts/build-go-tool.sh promtool

kubeconform: ## build kubeconform (tools/kubeconform/go.mod) into build/bin/kubeconform (once)
	@scripts/build-go-tool.sh kubeconform

# kubeconform's schemas, generated offline (Kubernetes' OpenAPI from the e2e's k8s.io/kubernetes
# module, the CRDs): nothing is fetched while checking.
.PHONY: kube-schemas
kube-schemas: install ## JSON schemas for kubeconform into build/kube-schemas
	@scripts/build-kube-schemas.sh
KUBECONFORM := build/bin/kubeconform -strict -summary -schema-location 'build/kube-schemas/{{ .ResourceKind }}_{{ .Group }}_{{ .ResourceAPIVersion }}.json'

# The chart's CRDs are copies of crds/ (generated from the pydantic models); a test fails on
# drift. kopf-peerings.yaml (Kopf's peering CRDs) belongs to the chart alone.
chart-crds: ## copy crds/ into the chart
	@mkdir -p $(CHART)/crds
	find $(CHART)/crds -name '*.yaml' ! -name kopf-peerings.yaml -delete
	cp crds/*.yaml $(CHART)/crds/

chart-lint: install helm promtool kubeconform kube-schemas ## helm lint, rendered-manifest checks and alert unit tests of charts/staticfleet
	$(HELM) lint --strict $(CHART)
	$(HELM) lint --strict $(CHART) -f $(CHART)/ci/full-values.yaml
	$(HELM) template sf $(CHART) --namespace staticfleet-system --include-crds | $(PY) scripts/check_manifests.py --profile default
	$(HELM) template sf $(CHART) --namespace staticfleet-system --include-crds -f $(CHART)/ci/full-values.yaml | $(PY) scripts/check_manifests.py --profile full
	$(HELM) template sf $(CHART) --namespace staticfleet-system --include-crds --set store.persistence.enabled=false | $(PY) scripts/check_manifests.py --profile ephemeral
	$(HELM) template sf $(CHART) --namespace staticfleet-system --set metrics.prometheusRule.enabled=true | $(PY) scripts/check_rules.py
	$(HELM) template sf $(CHART) --namespace staticfleet-system --include-crds | $(KUBECONFORM) -
	$(HELM) template sf $(CHART) --namespace staticfleet-system --include-crds -f $(CHART)/ci/full-values.yaml | $(KUBECONFORM) -
	$(HELM) template sf $(CHART) --namespace staticfleet-system --include-crds --set store.persistence.enabled=false | $(KUBECONFORM) -
	$(KUBECONFORM) examples crds

# --- End to end (e2e/) ---------------------------------------------------------------------
# A real control plane (etcd, kube-apiserver, kube-controller-manager, kubectl) built once from
# the Go module proxy into build/e2e/bin, a real node beside it (scripts/node/build.sh), the
# chart installed with the helm above. See e2e/README.md.
E2E_PYTEST := $(PY) -m pytest -q -o testpaths=e2e --timeout 1500 -p no:cacheprovider

.PHONY: e2e e2e-build e2e-node prometheus

e2e-build: helm prometheus ## build etcd, kube-apiserver, kube-controller-manager, kubectl, KEDA into build/e2e/bin, and Prometheus (once)
	@e2e/build.sh
	@scripts/build-keda.sh

# The Prometheus server of scenario 9f (same release as promtool; no web UI assets needed).
prometheus: ## build prometheus (tools/prometheus/go.mod) into build/bin/prometheus (once)
	@scripts/build-go-tool.sh prometheus

# e2e/node/test_image.py (the chart's image built and run in containerd) and every scenario on
# a real kubelet, containerd, kube-proxy and CoreDNS (e2e/node/: 1, the CRDs, and 2, the chart's
# install and uninstall, on the bare node; 10, the chart's operator and a fleet; 11, liveness,
# OOM, drain; 11b, two operator replicas; 11c, a full drain; 3-9f, written for any Cluster, the
# Kafka ones with the client images, 9e with KEDA as host processes; 12, Getting started), and
# 9g (a control plane of its own); the node probe with both containerds
# (e2e/node/test_node.py) is `make e2e-node` with the node scenarios (docs/node.md).
e2e: install bytecode e2e-build soak-tools ## the end-to-end scenarios on a real node beside a local control plane (e2e/README.md)
	$(E2E_PYTEST) e2e --ignore=e2e/node/test_node.py

e2e-node: install bytecode e2e-build ## a real node (kubelet, containerd, kube-proxy, CoreDNS) runs the image, the chart and every node scenario, and the node probe (docs/node.md)
	$(E2E_PYTEST) e2e/node

# --- Kafka's own assignors (java/assignors) ------------------------------------------------
# A harness jar around kafka-clients' assignors, built by Maven from java/assignors/pom.xml
# into build/java/assignors; tests/assignors/test_java_differential.py compares ours with it.
# Needs a JDK (17+) and Maven on PATH, as the Spark tests need Java.
JAVA_ASSIGNORS_JAR := build/java/assignors/assignor-harness.jar
JAVA_ASSIGNORS_SOURCES := java/assignors/pom.xml $(shell find java/assignors/src -name '*.java' 2>/dev/null)

.PHONY: java-assignors
java-assignors: $(JAVA_ASSIGNORS_JAR) ## Kafka's own assignors in a harness jar (Maven) for the differential test

$(JAVA_ASSIGNORS_JAR): $(JAVA_ASSIGNORS_SOURCES)
	@echo "java-assignors: mvn package (kafka-clients assignors harness) -> build/java/assignors"
	@mkdir -p build/java
	@mvn -q -B --no-transfer-progress -Dstyle.color=never -f java/assignors/pom.xml package \
		>build/java/assignors-build.log 2>&1 || { cat build/java/assignors-build.log; exit 1; }
	@touch $@

# --- The chart's image (scripts/build-image.sh, docs/node.md) -----------------------------------
# Built from the Dockerfile by buildah on a base that mmdebstrap makes from Debian's packages: no
# container registry, no Docker engine. Needs root. The base is cached by its package list.
.PHONY: image
image: ## the chart's image (Dockerfile, Debian base, buildah) -> build/image/staticfleet.oci.tar
	@scripts/build-image.sh
