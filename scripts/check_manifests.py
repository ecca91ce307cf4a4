"""Check the manifests `helm template` renders for charts/staticfleet.

    helm template sf charts/staticfleet --include-crds | python scripts/check_manifests.py
    ... -f charts/staticfleet/ci/full-values.yaml | python scripts/check_manifests.py --profile full

Only the project's own contract is checked here; each document's shape (apiVersion, fields,
types) is kubeconform's check against the Kubernetes and CRD schemas (`make chart-lint`,
scripts/build-kube-schemas.sh). Every document must have a name, one of the kinds this chart
renders, the chart's labels and the right scope. Then the chart's contract with the operator:
the Deployment runs `staticfleet operator run` with exactly the flags the operator takes,
the Services reach the ports the container declares, RBAC names no wildcard, and the
mutating webhook has a CA (a caBundle, or cert-manager's injection annotation).

More than one replica needs a store every replica mounts (a PVC, ReadWriteMany when the
chart creates it). A profile adds what one values file must produce (`default`: all
namespaces, a PVC the chart creates and keeps on uninstall, chart-generated certificate;
`full`: namespaced, PVC, cert-manager; `ephemeral`: an emptyDir asked for explicitly).
Exits 1 and lists every problem found, or prints a one-line summary.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import json
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import yaml

from staticfleet.logs import LOG_FORMATS

Doc = dict[str, Any]

# kind -> the apiVersions it may be rendered with.
# The kinds the chart may render (their schemas are kubeconform's business: make chart-lint).
KNOWN_KINDS: set[str] = {
    "ServiceAccount",
    "Secret",
    "Service",
    "PersistentVolumeClaim",
    "Deployment",
    "PodDisruptionBudget",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "MutatingWebhookConfiguration",
    "CustomResourceDefinition",
    "ClusterKopfPeering",
    "KopfPeering",
    "Certificate",
    "Issuer",
    "ServiceMonitor",
    "PrometheusRule",
    "ConfigMap",
}
CLUSTER_SCOPED = {
    "ClusterRole",
    "ClusterRoleBinding",
    "MutatingWebhookConfiguration",
    "CustomResourceDefinition",
    "ClusterKopfPeering",
}
ALLOWED_VERBS = {"get", "list", "watch", "create", "update", "patch", "delete"}
INJECT_CA = "cert-manager.io/inject-ca-from"

# The flags of `staticfleet operator run` whose values the chart fixes (the contract).
FIXED_FLAGS = {
    "--store": "sqlite:///data/coordinator.db",
    "--coordinator-host": "0.0.0.0",
    "--webhook-cert": "/certs/tls.crt",
    "--webhook-key": "/certs/tls.key",
}
# Flags that must be there once, with a value checked against other documents.
REQUIRED_FLAGS = {
    "--coordinator-port",
    "--coordinator-url",
    "--webhook-port",
    "--peering",
    "--health-port",
    "--log-format",
    *FIXED_FLAGS,
}


@dataclass
class Profile:
    cluster_wide: bool | None = None
    persistence: bool | None = None
    cert_manager: bool | None = None
    kinds: set[str] = field(default_factory=set)


DEFAULT_KINDS = {
    "ServiceAccount",
    "Secret",
    "Service",
    "Deployment",
    "ClusterRole",
    "ClusterRoleBinding",
    "MutatingWebhookConfiguration",
    "ClusterKopfPeering",
}

PROFILES: dict[str, Profile] = {
    "none": Profile(),
    "default": Profile(
        cluster_wide=True,
        persistence=True,
        cert_manager=False,
        kinds={*DEFAULT_KINDS, "PersistentVolumeClaim"},
    ),
    "ephemeral": Profile(
        cluster_wide=True,
        persistence=False,
        cert_manager=False,
        kinds=DEFAULT_KINDS,
    ),
    "full": Profile(
        cluster_wide=False,
        persistence=True,
        cert_manager=True,
        kinds={
            "ServiceAccount",
            "Secret",
            "Service",
            "PersistentVolumeClaim",
            "Deployment",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
            "MutatingWebhookConfiguration",
            "KopfPeering",
            "Certificate",
            "Issuer",
        },
    ),
}


def parse_flags(args: list[str]) -> tuple[list[str], dict[str, list[str]]]:
    """Split container args into leading words and --flag values (`--f=v` or `--f v`)."""
    words: list[str] = []
    flags: dict[str, list[str]] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("--"):
            if "=" in arg:
                name, value = arg.split("=", 1)
            elif i + 1 < len(args) and not args[i + 1].startswith("--"):
                name, value = arg, args[i + 1]
                i += 1
            else:
                name, value = arg, ""
            flags.setdefault(name, []).append(value)
        elif not flags:
            words.append(arg)
        i += 1
    return words, flags


def name_of(doc: Doc) -> str:
    meta = doc.get("metadata") or {}
    return f"{doc.get('kind')}/{meta.get('name')}"


def is_pem_certificate(b64: object) -> bool:
    if not isinstance(b64, str) or not b64:
        return False
    try:
        text = base64.b64decode(b64, validate=True).decode("ascii")
    except (binascii.Error, UnicodeDecodeError):
        return False
    return text.startswith("-----BEGIN CERTIFICATE-----")


class Checker:
    def __init__(self, docs: list[Doc], profile: Profile) -> None:
        self.docs = docs
        self.profile = profile
        self.problems: list[str] = []
        # Filled in by check_deployment / check_webhook, read by the later checks.
        self.flags: dict[str, list[str]] = {}
        self.container_ports: dict[str, int] = {}
        self.data_volume: Doc = {}
        self.cert_volume: Doc = {}
        self.uses_cert_manager = False

    def fail(self, msg: str) -> None:
        self.problems.append(msg)

    def of_kind(self, kind: str) -> list[Doc]:
        return [d for d in self.docs if d.get("kind") == kind]

    def find(self, kind: str, name: str, namespace: str | None = None) -> Doc | None:
        for d in self.of_kind(kind):
            meta = d.get("metadata") or {}
            if meta.get("name") == name and namespace in (None, meta.get("namespace")):
                return d
        return None

    def run(self) -> list[str]:
        self.check_documents()
        if not self.problems:
            self.check_deployment()
        if not self.problems:
            self.check_services()
            self.check_rbac()
            self.check_webhook()
            self.check_monitoring()
            self.check_profile()
        return self.problems

    # -- every document ---------------------------------------------------------------
    def check_documents(self) -> None:
        seen: Counter[tuple[str, str, str]] = Counter()
        for doc in self.docs:
            kind = doc.get("kind")
            meta = doc.get("metadata")
            if not isinstance(kind, str):
                self.fail(f"document without kind: {str(doc)[:80]}")
                continue
            if not isinstance(meta, dict) or not meta.get("name"):
                self.fail(f"{kind} without metadata.name")
                continue
            if kind not in KNOWN_KINDS:
                self.fail(f"{name_of(doc)}: unexpected kind {kind}")
            if kind in CLUSTER_SCOPED and "namespace" in meta:
                self.fail(f"{name_of(doc)}: cluster-scoped but has a namespace")
            if kind not in CLUSTER_SCOPED and not meta.get("namespace"):
                self.fail(f"{name_of(doc)}: namespaced but has no metadata.namespace")
            if kind != "CustomResourceDefinition":
                labels = meta.get("labels") or {}
                if labels.get("app.kubernetes.io/name") != "staticfleet":
                    self.fail(f"{name_of(doc)}: missing label app.kubernetes.io/name=staticfleet")
            key = (kind, str(meta.get("namespace", "")), str(meta["name"]))
            seen[key] += 1
        for (kind, ns, name), n in seen.items():
            if n > 1:
                self.fail(f"{kind}/{name} rendered {n} times in namespace {ns!r}")

    # -- the operator Deployment ------------------------------------------------------
    def deployment(self) -> Doc:
        return self.of_kind("Deployment")[0]

    def check_deployment(self) -> None:
        deps = self.of_kind("Deployment")
        if len(deps) != 1:
            self.fail(f"expected one Deployment, got {len(deps)}")
            return
        dep = deps[0]
        pod = dep["spec"]["template"]
        selector = dep["spec"]["selector"]["matchLabels"]
        pod_labels = pod["metadata"].get("labels") or {}
        if any(pod_labels.get(k) != v for k, v in selector.items()):
            self.fail("Deployment: selector does not match the pod template's labels")
        if "staticfleet.dev/group" in pod_labels:
            self.fail("Deployment: the operator's own pod carries staticfleet.dev/group")
        containers = pod["spec"]["containers"]
        if len(containers) != 1:
            self.fail(f"Deployment: expected one container, got {len(containers)}")
            return
        c = containers[0]
        command = c.get("command") or []
        args = [str(a) for a in c.get("args") or []]
        if command not in ([], ["staticfleet"]):
            self.fail(f"Deployment: command {command}, expected ['staticfleet']")
        words, flags = parse_flags(args)
        if words != ["operator", "run"]:
            self.fail(f"Deployment: args start {words}, expected ['operator', 'run']")
        for flag in sorted(REQUIRED_FLAGS):
            values = flags.get(flag, [])
            if len(values) != 1:
                self.fail(f"Deployment: {flag} given {len(values)} times, expected once")
        for flag, expected in FIXED_FLAGS.items():
            if flags.get(flag) and flags[flag] != [expected]:
                self.fail(f"Deployment: {flag}={flags[flag][0]}, expected {expected}")
        log_format = flags.get("--log-format", [""])[0]
        if log_format and log_format not in LOG_FORMATS:
            self.fail(f"Deployment: --log-format={log_format}, expected one of {LOG_FORMATS}")
        self.flags = flags

        ports = {p["name"]: p["containerPort"] for p in c.get("ports") or []}
        self.container_ports = ports
        for flag, port_name in [
            ("--coordinator-port", "coordinator"),
            ("--webhook-port", "webhook"),
            ("--health-port", "health"),
        ]:
            if flags.get(flag) and str(ports.get(port_name)) != flags[flag][0]:
                got = ports.get(port_name)
                self.fail(f"Deployment: {flag}={flags[flag][0]} but port {port_name}={got}")
        for probe, port_name, path in [
            ("livenessProbe", "health", "/healthz"),
            ("readinessProbe", "coordinator", "/readyz"),
        ]:
            get = (c.get(probe) or {}).get("httpGet") or {}
            if get.get("port") != port_name or get.get("path") != path:
                self.fail(f"Deployment: {probe} should GET {path} on port {port_name}")

        env = {e["name"]: e for e in c.get("env") or []}
        admin = env.get("STATICFLEET_ADMIN_TOKEN", {})
        ref = (admin.get("valueFrom") or {}).get("secretKeyRef") or {}
        if not ref.get("name") or not ref.get("key"):
            self.fail("Deployment: STATICFLEET_ADMIN_TOKEN must come from a secretKeyRef")
        else:
            secret = self.find("Secret", ref["name"])
            if secret is not None and ref["key"] not in (secret.get("data") or {}):
                self.fail(f"Deployment: Secret {ref['name']} has no key {ref['key']}")

        mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts") or []}
        volumes = {v["name"]: v for v in pod["spec"].get("volumes") or []}
        for path in ("/data", "/certs"):
            if path not in mounts or mounts[path] not in volumes:
                self.fail(f"Deployment: nothing mounted at {path}")
        self.data_volume = volumes.get(mounts.get("/data", ""), {})
        self.cert_volume = volumes.get(mounts.get("/certs", ""), {})
        items = {i["path"] for i in (self.cert_volume.get("secret") or {}).get("items") or []}
        if items and not {"tls.crt", "tls.key"} <= items:
            self.fail("Deployment: /certs must hold tls.crt and tls.key")
        claim = (self.data_volume.get("persistentVolumeClaim") or {}).get("claimName")
        pvc = self.find("PersistentVolumeClaim", claim) if claim else None
        if claim and pvc is None:
            self.fail(f"Deployment: claim {claim} is not rendered (existingClaim?)")
        # A standby that takes over must find the same static members and offsets.
        replicas = int(dep["spec"].get("replicas", 1))
        if replicas > 1 and not claim:
            self.fail(f"Deployment: {replicas} replicas, each with its own /data (no shared PVC)")
        shared = pvc is not None and "ReadWriteMany" in (pvc["spec"].get("accessModes") or [])
        if replicas > 1 and pvc is not None and not shared:
            self.fail(f"Deployment: {replicas} replicas share {claim}, not ReadWriteMany")

        peering = (flags.get("--peering") or [""])[0]
        namespaces = flags.get("--namespace", [])
        if namespaces:
            for ns in namespaces:
                found = [
                    p
                    for p in self.of_kind("KopfPeering")
                    if p["metadata"]["name"] == peering and p["metadata"]["namespace"] == ns
                ]
                if not found:
                    self.fail(f"no KopfPeering {peering} in watched namespace {ns}")
        elif self.find("ClusterKopfPeering", peering) is None:
            self.fail(f"no ClusterKopfPeering {peering} for a cluster-wide operator")

    # -- Services -----------------------------------------------------------------------
    def check_services(self) -> None:
        pod_labels = self.deployment()["spec"]["template"]["metadata"]["labels"]
        for svc in self.of_kind("Service"):
            sel = svc["spec"].get("selector") or {}
            if not sel or any(pod_labels.get(k) != v for k, v in sel.items()):
                self.fail(f"{name_of(svc)}: selector does not select the operator pod")
            for p in svc["spec"].get("ports") or []:
                target = p.get("targetPort", p.get("port"))
                if isinstance(target, str) and target not in self.container_ports:
                    self.fail(f"{name_of(svc)}: targetPort {target} is no container port")
        url = (self.flags.get("--coordinator-url") or [""])[0]
        port = (self.flags.get("--coordinator-port") or [""])[0]
        matched = False
        for svc in self.of_kind("Service"):
            meta = svc["metadata"]
            for p in svc["spec"].get("ports") or []:
                want = f"http://{meta['name']}.{meta['namespace']}.svc:{p['port']}"
                if url == want and str(self.container_ports.get(p.get("targetPort"))) == port:
                    matched = True
        if not matched:
            self.fail(f"--coordinator-url={url}: no Service of it reaches --coordinator-port")

    # -- RBAC -----------------------------------------------------------------------------
    def check_rbac(self) -> None:
        sa_name = self.deployment()["spec"]["template"]["spec"].get("serviceAccountName")
        for role in self.of_kind("ClusterRole") + self.of_kind("Role"):
            for rule in role.get("rules") or []:
                for key in ("apiGroups", "resources", "verbs"):
                    if "*" in (rule.get(key) or []):
                        self.fail(f"{name_of(role)}: wildcard in {key}: {rule}")
                bad = set(rule.get("verbs") or []) - ALLOWED_VERBS
                if bad:
                    self.fail(f"{name_of(role)}: verbs {sorted(bad)} are not needed")
                if rule.get("nonResourceURLs"):
                    self.fail(f"{name_of(role)}: nonResourceURLs are not needed")
        for binding in self.of_kind("ClusterRoleBinding") + self.of_kind("RoleBinding"):
            ref = binding["roleRef"]
            ns = binding["metadata"].get("namespace") if ref["kind"] == "Role" else None
            if self.find(ref["kind"], ref["name"], ns) is None:
                self.fail(f"{name_of(binding)}: roleRef {ref['kind']}/{ref['name']} not rendered")
            subjects = binding.get("subjects") or []
            if [s.get("name") for s in subjects] != [sa_name]:
                self.fail(f"{name_of(binding)}: subjects {subjects} != the operator's account")
        if self.find("ServiceAccount", str(sa_name)) is None:
            self.fail(f"ServiceAccount {sa_name} is not rendered")

        granted: set[tuple[str, str, str]] = set()
        for role in self.of_kind("ClusterRole") + self.of_kind("Role"):
            for rule in role.get("rules") or []:
                for g in rule.get("apiGroups") or []:
                    for r in rule.get("resources") or []:
                        for v in rule.get("verbs") or []:
                            granted.add((g, r, v))
        needed = [
            ("staticfleet.dev", "consumergroups", "watch"),
            ("staticfleet.dev", "consumergroups", "patch"),
            ("staticfleet.dev", "consumergroups/status", "patch"),
            ("staticfleet.dev", "consumergroups/finalizers", "update"),
            ("", "pods", "create"),
            ("", "pods", "delete"),
            ("", "pods", "watch"),
            ("", "events", "create"),
            ("", "secrets", "get"),
            ("", "secrets", "create"),
            ("apiextensions.k8s.io", "customresourcedefinitions", "list"),
        ]
        peering_kind = "kopfpeerings" if self.flags.get("--namespace") else "clusterkopfpeerings"
        needed += [("kopf.dev", peering_kind, "watch"), ("kopf.dev", peering_kind, "patch")]
        for need in needed:
            if need not in granted:
                self.fail(f"RBAC does not grant {need[2]} on {need[0] or 'core'}/{need[1]}")

    # -- the admission webhook ----------------------------------------------------------
    def check_webhook(self) -> None:
        configs = self.of_kind("MutatingWebhookConfiguration")
        if len(configs) != 1:
            self.fail(f"expected one MutatingWebhookConfiguration, got {len(configs)}")
            return
        mwc = configs[0]
        annotations = mwc["metadata"].get("annotations") or {}
        inject = annotations.get(INJECT_CA)
        self.uses_cert_manager = inject is not None
        webhooks = mwc.get("webhooks") or []
        if len(webhooks) != 1:
            self.fail(f"{name_of(mwc)}: expected one webhook, got {len(webhooks)}")
            return
        wh = webhooks[0]
        if wh.get("sideEffects") != "None":
            self.fail(f"{name_of(mwc)}: sideEffects must be None")
        if "v1" not in (wh.get("admissionReviewVersions") or []):
            self.fail(f"{name_of(mwc)}: admissionReviewVersions must include v1")
        if wh.get("failurePolicy") not in ("Fail", "Ignore"):
            self.fail(f"{name_of(mwc)}: failurePolicy {wh.get('failurePolicy')}")
        if not 1 <= int(wh.get("timeoutSeconds", 10)) <= 30:
            self.fail(f"{name_of(mwc)}: timeoutSeconds out of range")
        rules = wh.get("rules") or []
        if [(r.get("resources"), r.get("operations")) for r in rules] != [(["pods"], ["CREATE"])]:
            self.fail(f"{name_of(mwc)}: should match pods CREATE only, got {rules}")
        if not (wh.get("objectSelector") or {}) and not (wh.get("namespaceSelector") or {}):
            self.fail(f"{name_of(mwc)}: no selector: every pod in the cluster would be sent")

        client = wh.get("clientConfig") or {}
        svc_ref = client.get("service") or {}
        if not str(svc_ref.get("path", "")).startswith("/"):
            self.fail(f"{name_of(mwc)}: clientConfig.service.path must start with /")
        svc = self.find("Service", svc_ref.get("name", ""))
        if svc is None or svc["metadata"]["namespace"] != svc_ref.get("namespace"):
            self.fail(f"{name_of(mwc)}: service {svc_ref.get('name')} is not rendered")
        else:
            ports = {p["port"]: p.get("targetPort") for p in svc["spec"]["ports"]}
            target = ports.get(svc_ref.get("port", 443))
            webhook_port = (self.flags.get("--webhook-port") or [""])[0]
            if str(self.container_ports.get(str(target), target)) != webhook_port:
                self.fail(f"{name_of(mwc)}: service port does not reach --webhook-port")

        secret_name = (self.cert_volume.get("secret") or {}).get("secretName")
        ca_bundle = client.get("caBundle")
        if inject is None:
            if not is_pem_certificate(ca_bundle):
                self.fail(f"{name_of(mwc)}: neither a PEM caBundle nor {INJECT_CA}")
            secret = self.find("Secret", str(secret_name))
            data = (secret or {}).get("data") or {}
            if secret is None:
                self.fail(f"webhook certificate Secret {secret_name} is not rendered")
            elif data.get("ca.crt") != ca_bundle:
                self.fail(f"Secret {secret_name}: ca.crt differs from the webhook's caBundle")
            elif not is_pem_certificate(data.get("tls.crt")) or not data.get("tls.key"):
                self.fail(f"Secret {secret_name}: no tls.crt/tls.key")
        else:
            if ca_bundle:
                self.fail(f"{name_of(mwc)}: a caBundle and {INJECT_CA} at once")
            ns, _, cert_name = str(inject).partition("/")
            cert = self.find("Certificate", cert_name)
            if cert is None or cert["metadata"]["namespace"] != ns:
                self.fail(f"{name_of(mwc)}: {INJECT_CA} names {inject}, not rendered")
            elif cert["spec"].get("secretName") != secret_name:
                self.fail(f"Certificate {cert_name}: secretName is not the mounted {secret_name}")
            else:
                svc_dns = f"{svc_ref.get('name')}.{svc_ref.get('namespace')}.svc"
                if svc_dns not in (cert["spec"].get("dnsNames") or []):
                    self.fail(f"Certificate {cert_name}: dnsNames lack {svc_dns}")

    # -- Prometheus Operator and Grafana (optional) ---------------------------------------
    def check_monitoring(self) -> None:
        """The ServiceMonitor scrapes the coordinator port of a Service it selects; the rules'
        down alert names that Service as its job; the dashboard is JSON with panels."""
        scraped: set[str] = set()
        for sm in self.of_kind("ServiceMonitor"):
            want = sm["spec"]["selector"].get("matchLabels") or {}
            selected = [
                s
                for s in self.of_kind("Service")
                if all((s["metadata"].get("labels") or {}).get(k) == v for k, v in want.items())
            ]
            for endpoint in sm["spec"].get("endpoints") or []:
                hits = [
                    s["metadata"]["name"]
                    for s in selected
                    if any(p.get("name") == endpoint.get("port") for p in s["spec"]["ports"])
                ]
                if not hits:
                    self.fail(f"{name_of(sm)}: no selected Service has port {endpoint.get('port')}")
                if endpoint.get("path") != "/metrics":
                    self.fail(f"{name_of(sm)}: path {endpoint.get('path')}, expected /metrics")
                scraped.update(hits)
        for rule in self.of_kind("PrometheusRule"):
            exprs = [
                str(r.get("expr", ""))
                for group in rule["spec"]["groups"]
                for r in group["rules"]
                if r.get("alert") == "StaticfleetOperatorDown"
            ]
            if not exprs:
                self.fail(f"{name_of(rule)}: no StaticfleetOperatorDown alert")
            coordinator = self.flags.get("--coordinator-url", [""])[0].split("//")[-1]
            service = coordinator.split(".")[0]
            if exprs and f'job="{service}"' not in exprs[0]:
                self.fail(f"{name_of(rule)}: StaticfleetOperatorDown does not watch job {service}")
            if scraped and service not in scraped:
                self.fail(f"{name_of(rule)}: the ServiceMonitor does not scrape {service}")
        for cm in self.of_kind("ConfigMap"):
            for key, text in (cm.get("data") or {}).items():
                if key.endswith(".json"):
                    try:
                        panels = json.loads(text).get("panels")
                    except (ValueError, AttributeError):
                        panels = None
                    if not panels:
                        self.fail(f"{name_of(cm)}: {key} is no dashboard with panels")

    # -- what one values file must produce ---------------------------------------------------
    def check_profile(self) -> None:
        p = self.profile
        kinds = {str(d.get("kind")) for d in self.docs}
        for kind in sorted(p.kinds - kinds):
            self.fail(f"profile: expected a {kind}")
        if p.cluster_wide is not None and p.cluster_wide != (not self.flags.get("--namespace")):
            self.fail(f"profile: expected cluster_wide={p.cluster_wide}")
        if p.persistence is not None:
            has_pvc = "persistentVolumeClaim" in self.data_volume
            if p.persistence != has_pvc:
                self.fail(f"profile: expected persistence={p.persistence} for /data")
            if not has_pvc and "emptyDir" not in self.data_volume:
                self.fail("profile: /data is neither a PVC nor an emptyDir")
        if p.cert_manager is not None and p.cert_manager != self.uses_cert_manager:
            self.fail(f"profile: expected cert_manager={p.cert_manager}")


def load(stream: Iterable[str] | str) -> list[Doc]:
    text = stream if isinstance(stream, str) else "".join(stream)
    docs: list[Doc] = []
    for doc in yaml.safe_load_all(text):
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise ValueError(f"a document is not a mapping: {str(doc)[:80]}")
        docs.append(doc)
    return docs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("files", nargs="*", help="rendered manifests (default: stdin)")
    parser.add_argument("--profile", choices=sorted(PROFILES), default="none")
    opts = parser.parse_args(argv)
    if opts.files:
        text = ""
        for path in opts.files:
            with open(path, encoding="utf-8") as f:
                text += f.read() + "\n---\n"
    else:
        text = sys.stdin.read()
    try:
        docs = load(text)
    except (yaml.YAMLError, ValueError) as exc:
        print(f"check_manifests: cannot parse: {exc}", file=sys.stderr)
        return 1
    if not docs:
        print("check_manifests: no documents", file=sys.stderr)
        return 1
    problems = Checker(docs, PROFILES[opts.profile]).run()
    if problems:
        for p in problems:
            print(f"check_manifests: {p}", file=sys.stderr)
        print(f"check_manifests: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    kinds = Counter(str(d["kind"]) for d in docs)
    summary = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
    print(f"check_manifests[{opts.profile}]: {len(docs)} documents OK ({summary})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
