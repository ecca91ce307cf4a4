"""Certificates and keys of the e2e control plane (e2e/controlplane.py).

One cluster CA signs the API server's serving certificate and the client certificates of the
admin (CN=e2e-admin, O=system:masters), of kube-controller-manager
(CN=system:kube-controller-manager) and of the API server towards kubelets
(CN=kube-apiserver-kubelet-client). A separate front-proxy CA signs the aggregator's client
certificate (CN=front-proxy-client). The service-account key pair signs and verifies
ServiceAccount tokens. All files are PEM; private keys are unencrypted and mode 0600.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

# One way to make certificates in the project: staticfleet/kafka/pki.py.
from staticfleet.kafka.pki import CertificateAuthority, KeyPair, ip_sans, name, write_key

__all__ = ["ClusterCerts", "KeyPair", "generate_certs", "serving_cert"]

# The first address of --service-cluster-ip-range=10.96.0.0/16: the `kubernetes` Service.
KUBERNETES_SERVICE_IP = "10.96.0.1"
API_SERVER_DNS_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
ADMIN_USER = "e2e-admin"
CONTROLLER_MANAGER_USER = "system:kube-controller-manager"
FRONT_PROXY_CLIENT_USER = "front-proxy-client"
# The API server's client certificate towards kubelets (logs, exec), as kubeadm names it.
KUBELET_CLIENT_USER = "kube-apiserver-kubelet-client"


@dataclass(frozen=True)
class ClusterCerts:
    """Every file generate_certs() writes."""

    directory: Path
    ca: KeyPair
    apiserver: KeyPair
    admin: KeyPair
    controller_manager: KeyPair
    kubelet_client: KeyPair  # --kubelet-client-certificate/key (a real node: e2e/node/)
    front_proxy_ca: KeyPair
    front_proxy_client: KeyPair
    service_account_key: Path  # private (RSA): --service-account-signing-key-file and KCM's
    service_account_pub: Path  # public: --service-account-key-file


def generate_certs(directory: Path, node_ip: str) -> ClusterCerts:
    """Write a fresh CA, the API server's and clients' certificates and the SA keys."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = CertificateAuthority.create(directory, "ca", "e2e-kubernetes-ca")
    sans: list[x509.GeneralName] = ip_sans(*sorted({"127.0.0.1", node_ip, KUBERNETES_SERVICE_IP}))
    sans += [x509.DNSName(dns_name) for dns_name in API_SERVER_DNS_NAMES]
    apiserver = ca.issue(directory, "apiserver", name("kube-apiserver"), server=True, sans=sans)
    admin = ca.issue(directory, "admin", name(ADMIN_USER, "system:masters"), server=False)
    controller_manager = ca.issue(
        directory, "controller-manager", name(CONTROLLER_MANAGER_USER), server=False
    )
    kubelet_client = ca.issue(
        directory,
        "apiserver-kubelet-client",
        name(KUBELET_CLIENT_USER, "system:masters"),
        server=False,
    )
    front_proxy_ca = CertificateAuthority.create(directory, "front-proxy-ca", "e2e-front-proxy-ca")
    front_proxy_client = front_proxy_ca.issue(
        directory, "front-proxy-client", name(FRONT_PROXY_CLIENT_USER), server=False
    )
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    sa_key_path = directory / "sa.key"
    sa_pub_path = directory / "sa.pub"
    write_key(sa_key_path, sa_key)
    sa_pub_path.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return ClusterCerts(
        directory=directory,
        ca=ca.pair,
        apiserver=apiserver,
        admin=admin,
        controller_manager=controller_manager,
        kubelet_client=kubelet_client,
        front_proxy_ca=front_proxy_ca.pair,
        front_proxy_client=front_proxy_client,
        service_account_key=sa_key_path,
        service_account_pub=sa_pub_path,
    )


def serving_cert(directory: Path, ip: str) -> tuple[KeyPair, KeyPair]:
    """A fresh CA and a server certificate for `ip` signed by it (a webhook served on
    loopback, named by URL in a webhook configuration): (ca, server)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = CertificateAuthority.create(directory, "serving-ca", "staticfleet-serving-ca")
    server = ca.issue(directory, "serving", name(ip), server=True, sans=ip_sans(ip))
    return ca.pair, server
