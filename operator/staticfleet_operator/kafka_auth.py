"""The operator's own Kafka client settings for a group: `spec.coordinator.kafka` plus the
Secrets it names, or the operator's default (`--kafka-config`).

`client_settings` is pure: (the spec, the Secrets' decoded data) -> `KafkaClientSettings`
with every PEM inline (nothing is written to disk here). `context.read_client_settings` is
the I/O edge: it reads the named Secrets from the operator's store of Opaque Secrets (a
rotated password or certificate wakes the group) or, for other Secret types
(kubernetes.io/tls), from the API. The backends are cached by a fingerprint of
the settings (backends.py), so the next pass after a rotation connects anew with
the new credentials, without a restart. docs/operator.md, "Secured clusters".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from pydantic import SecretStr

from coordinator.client.kafka_errors import KafkaAccessError
from coordinator.client.kafka_settings import (
    OIDC,
    KafkaClientSettings,
    KafkaSettingsError,
    SaslMechanism,
    SecurityProtocol,
)
from staticfleet_operator.crd import KafkaAuthenticationType, KafkaClientSpec
from staticfleet_operator.tokens import secret_value

# A Secret's decoded data (key -> text); None: the Secret does not exist.
SecretData = Mapping[str, str] | None

SASL_MECHANISMS: Final = {
    KafkaAuthenticationType.SCRAM_SHA_512: SaslMechanism.SCRAM_SHA_512,
    KafkaAuthenticationType.SCRAM_SHA_256: SaslMechanism.SCRAM_SHA_256,
    KafkaAuthenticationType.PLAIN: SaslMechanism.PLAIN,
    KafkaAuthenticationType.OAUTH: SaslMechanism.OAUTHBEARER,
}


class KafkaCredentialsMissing(KafkaAccessError):
    """A Secret that spec.coordinator.kafka names, or a key of it, is missing or empty."""

    reason = "KafkaCredentialsMissing"


class KafkaSettingsInvalid(KafkaAccessError):
    """The Secrets' content makes settings no client can use (e.g. not PEM)."""

    reason = "KafkaSettingsInvalid"


def referenced_secrets(kafka: KafkaClientSpec | None) -> list[str]:
    """The names of the Secrets `kafka` reads, in a stable order, each once."""
    if kafka is None:
        return []
    names: list[str] = []
    if kafka.tls is not None:
        names += [cert.secret_name for cert in kafka.tls.trusted_certificates]
    auth = kafka.authentication
    if auth is not None:
        for source in (auth.password_secret, auth.certificate_and_key, auth.client_secret):
            if source is not None:
                names.append(source.secret_name)
    return list(dict.fromkeys(names))


def client_settings(
    kafka: KafkaClientSpec | None,
    secrets: Mapping[str, SecretData],
    default: KafkaClientSettings,
    *,
    namespace: str = "",
    where: str = "spec.coordinator.kafka",
) -> KafkaClientSettings:
    """The operator's settings for a group with `spec.coordinator.kafka` = `kafka`, given
    each referenced Secret's data (`secrets`, by name); `default` when `kafka` is None.
    Raises `KafkaCredentialsMissing` naming the Secret and key (never a value); `where`:
    the spec's block, for the messages (spec.source.kafka takes the same shape)."""
    if kafka is None:
        return default

    def value(secret: str, key: str, field: str) -> str:
        data = secrets.get(secret)
        where = f"{namespace}/{secret}" if namespace else secret
        if data is None:
            raise KafkaCredentialsMissing(f"Secret {where} ({field}) not found")
        text = data.get(key)
        if not text:
            raise KafkaCredentialsMissing(f"Secret {where} has no key {key!r} ({field})")
        return text

    fields: dict[str, Any] = {}
    auth = kafka.authentication
    tls = kafka.tls is not None
    sasl = auth is not None and auth.type is not KafkaAuthenticationType.TLS
    fields["security_protocol"] = {
        (False, False): SecurityProtocol.PLAINTEXT,
        (True, False): SecurityProtocol.SSL,
        (False, True): SecurityProtocol.SASL_PLAINTEXT,
        (True, True): SecurityProtocol.SASL_SSL,
    }[(tls, sasl)]
    if kafka.tls is not None and kafka.tls.trusted_certificates:
        fields["ssl_ca_pem"] = "".join(
            _pem(value(c.secret_name, c.certificate, "tls.trustedCertificates"))
            for c in kafka.tls.trusted_certificates
        )
    if auth is not None:
        if auth.type is KafkaAuthenticationType.TLS:
            source = auth.certificate_and_key
            assert source is not None  # the CRD's rule
            fields["ssl_certificate_pem"] = _pem(
                value(source.secret_name, source.certificate, "certificateAndKey.certificate")
            )
            fields["ssl_key_pem"] = SecretStr(
                _pem(value(source.secret_name, source.key, "certificateAndKey.key"))
            )
        elif auth.type is KafkaAuthenticationType.OAUTH:
            secret = auth.client_secret
            assert secret is not None
            fields["sasl_mechanism"] = SaslMechanism.OAUTHBEARER
            fields["oauth_method"] = OIDC
            fields["oauth_token_endpoint_url"] = auth.token_endpoint_uri
            fields["oauth_client_id"] = auth.client_id
            fields["oauth_client_secret"] = SecretStr(
                value(secret.secret_name, secret.key, "clientSecret")
            )
            fields["oauth_scope"] = auth.scope
        else:
            password = auth.password_secret
            assert password is not None
            fields["sasl_mechanism"] = SASL_MECHANISMS[auth.type]
            fields["sasl_username"] = auth.username
            fields["sasl_password"] = SecretStr(
                value(password.secret_name, password.password, "passwordSecret")
            )
    try:
        return KafkaClientSettings(**fields)
    except (KafkaSettingsError, ValueError) as error:
        raise KafkaSettingsInvalid(f"{where}: {error}") from None


def _pem(text: str) -> str:
    # Secret values are read stripped; a PEM block ends with a newline.
    return text.strip() + "\n"


def decoded(secret: Mapping[str, Any] | None) -> SecretData:
    """A Secret's data, decoded (keys whose value is not UTF-8 text are left out)."""
    if secret is None:
        return None
    keys = set(secret.get("data") or {}) | set(secret.get("stringData") or {})
    values = {key: secret_value(secret, key) for key in keys}
    return {key: text for key, text in values.items() if text is not None}


__all__ = [
    "KafkaCredentialsMissing",
    "KafkaSettingsInvalid",
    "client_settings",
    "decoded",
    "referenced_secrets",
]
