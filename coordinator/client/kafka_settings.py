"""How the project's own Kafka clients reach a cluster: protocol, TLS material, SASL credentials.

One settings model for every connection the project makes itself (our member's
`KafkaTransport`, the Kafka source, the operator's backend, the conformance runner, the
demo), spelled with librdkafka's property names so that the same file configures
confluent-kafka unchanged (`librdkafka_config`). Java's `sasl.jaas.config` (PlainLoginModule,
ScramLoginModule, OAuthBearerLoginModule) is accepted as another spelling of the SASL
credentials, so a Java client's properties file works too. docs/kafka.md, "Secured clusters".

Secrets (passwords, inline private keys, the OAuth client secret) are pydantic `SecretStr`s:
never in `repr`/`str`; `redacted()` is what logs show. Only `to_properties` and
`librdkafka_config` carry them in clear, for the clients that need them.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any, Final

from jproperties import Properties  # type: ignore[import-untyped]
from pydantic import BaseModel, ConfigDict, SecretStr, ValidationError

logger = logging.getLogger(__name__)


class SecurityProtocol(StrEnum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def uses_tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def uses_sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)


class SaslMechanism(StrEnum):
    PLAIN = "PLAIN"
    SCRAM_SHA_256 = "SCRAM-SHA-256"
    SCRAM_SHA_512 = "SCRAM-SHA-512"
    OAUTHBEARER = "OAUTHBEARER"


class KafkaSettingsError(ValueError):
    """A bad Kafka client property: the message names the property and what is wrong."""


REDACTED: Final = "[redacted]"

# Kafka's consumer's request.timeout.ms default. Here, not in kafka_transport, so a member on
# our coordinator reads it without importing the Kafka protocol (kafka-python).
DEFAULT_REQUEST_TIMEOUT_MS: Final = 30_000

# librdkafka's name -> the field it sets. The order is the order `to_properties` writes.
PROPERTY_FIELDS: Final[Mapping[str, str]] = {
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.username": "sasl_username",
    "sasl.password": "sasl_password",
    "sasl.oauthbearer.method": "oauth_method",
    "sasl.oauthbearer.token.endpoint.url": "oauth_token_endpoint_url",
    "sasl.oauthbearer.client.id": "oauth_client_id",
    "sasl.oauthbearer.client.secret": "oauth_client_secret",
    "sasl.oauthbearer.scope": "oauth_scope",
    "ssl.ca.location": "ssl_ca_location",
    "ssl.ca.pem": "ssl_ca_pem",
    "ssl.certificate.location": "ssl_certificate_location",
    "ssl.certificate.pem": "ssl_certificate_pem",
    "ssl.key.location": "ssl_key_location",
    "ssl.key.pem": "ssl_key_pem",
    "ssl.key.password": "ssl_key_password",
    "ssl.endpoint.identification.algorithm": "ssl_endpoint_identification",
}
FIELD_PROPERTIES: Final[Mapping[str, str]] = {f: p for p, f in PROPERTY_FIELDS.items()}
SECRET_PROPERTIES: Final = frozenset(
    {"sasl.password", "sasl.oauthbearer.client.secret", "ssl.key.pem", "ssl.key.password"}
)
JAAS_PROPERTY: Final = "sasl.jaas.config"

# Java spellings with no librdkafka equivalent here: what to write instead.
JAVA_ONLY: Final[Mapping[str, str]] = {
    "ssl.truststore.location": "ssl.ca.location (a PEM file)",
    "ssl.truststore.certificates": "ssl.ca.pem",
    "ssl.truststore.type": "ssl.ca.location or ssl.ca.pem (PEM only)",
    "ssl.truststore.password": "ssl.ca.location (PEM needs no password)",
    "ssl.keystore.location": "ssl.certificate.location and ssl.key.location (PEM files)",
    "ssl.keystore.type": "ssl.certificate.location and ssl.key.location (PEM only)",
    "ssl.keystore.password": "ssl.key.password",
    "ssl.keystore.key": "ssl.key.pem",
    "ssl.keystore.certificate.chain": "ssl.certificate.pem",
    "sasl.login.callback.handler.class": "sasl.oauthbearer.method=oidc",
}

OIDC: Final = "oidc"
LOGIN_MODULES: Final[Mapping[str, SaslMechanism | None]] = {
    "org.apache.kafka.common.security.plain.PlainLoginModule": SaslMechanism.PLAIN,
    # SCRAM-SHA-256 or -512: sasl.mechanism says which.
    "org.apache.kafka.common.security.scram.ScramLoginModule": None,
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule": (
        SaslMechanism.OAUTHBEARER
    ),
}


class KafkaClientSettings(BaseModel):
    """One client's settings; built by `from_properties`/`from_file` (which explain bad input
    property by property) or directly (then a bad combination raises pydantic's
    `ValidationError`, also a `ValueError`, carrying the same message)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    security_protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    sasl_mechanism: SaslMechanism | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    oauth_method: str | None = None
    oauth_token_endpoint_url: str | None = None
    oauth_client_id: str | None = None
    oauth_client_secret: SecretStr | None = None
    oauth_scope: str | None = None
    ssl_ca_location: str | None = None
    ssl_ca_pem: str | None = None
    ssl_certificate_location: str | None = None
    ssl_certificate_pem: str | None = None
    ssl_key_location: str | None = None
    ssl_key_pem: SecretStr | None = None
    ssl_key_password: SecretStr | None = None
    ssl_endpoint_identification: bool = True

    def model_post_init(self, _context: Any) -> None:
        check(self)

    # ------------------------------------------------------------------ reading

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> KafkaClientSettings:
        """From librdkafka-named properties (+ Java's `sasl.jaas.config`); empty values count
        as unset, as in a pod's environment."""
        fields: dict[str, Any] = {}
        props = {key.strip(): value.strip() for key, value in props.items()}
        for key, value in props.items():
            if key == JAAS_PROPERTY or (not value and key in PROPERTY_FIELDS):
                continue
            if key in JAVA_ONLY:
                raise KafkaSettingsError(f"{key}: not supported here; use {JAVA_ONLY[key]}")
            field = PROPERTY_FIELDS.get(key)
            if field is None:
                raise KafkaSettingsError(
                    f"{key}: unknown property (known: {', '.join(sorted(PROPERTY_FIELDS))}, "
                    f"{JAAS_PROPERTY})"
                )
            fields[field] = _parse_value(key, value)
        # Java writes "no hostname check" as an empty algorithm.
        if props.get("ssl.endpoint.identification.algorithm") == "":
            fields["ssl_endpoint_identification"] = False
        jaas = props.get(JAAS_PROPERTY)
        if jaas:
            _merge_jaas(fields, jaas)
        try:
            return cls(**fields)
        except ValidationError as error:
            raise _settings_error(error) from None

    @classmethod
    def from_file(cls, path: str | Path) -> KafkaClientSettings:
        """From a Java-style .properties file (comments, `:` or `=` or blank separators, line
        continuations, `\\uXXXX` escapes: jproperties' parser)."""
        path = Path(path)
        try:
            data = path.read_bytes()
        except OSError as error:
            raise KafkaSettingsError(f"cannot read Kafka settings file {path}: {error}") from None
        parsed = Properties()
        try:
            parsed.load(data, "utf-8")
        except Exception as error:  # jproperties raises its own ParseError and UnicodeError
            raise KafkaSettingsError(f"{path}: not a properties file: {error}") from None
        try:
            return cls.from_properties({key: value.data for key, value in parsed.items()})
        except KafkaSettingsError as error:
            raise KafkaSettingsError(f"{path}: {error}") from None

    # ------------------------------------------------------------------ writing

    def to_properties(self) -> dict[str, str]:
        """librdkafka-named properties, secrets in clear; `from_properties` reads them back
        to equal settings."""
        props: dict[str, str] = {}
        for field, prop in FIELD_PROPERTIES.items():
            value = getattr(self, field)
            if field == "ssl_endpoint_identification":
                if self.security_protocol.uses_tls:
                    props[prop] = "https" if value else "none"
            elif isinstance(value, SecretStr):
                props[prop] = value.get_secret_value()
            elif value is not None:
                props[prop] = str(value)
        return props

    def librdkafka_config(self) -> dict[str, str]:
        """What confluent-kafka's Consumer/AdminClient take (merge it into their config)."""
        return self.to_properties()

    def redacted(self) -> dict[str, str]:
        """`to_properties` with every secret replaced: for logs and error messages."""
        return {
            key: REDACTED if key in SECRET_PROPERTIES else value
            for key, value in self.to_properties().items()
        }

    def describe(self) -> str:
        """A one-line summary for logs: protocol, mechanism, user (never a secret)."""
        parts = [str(self.security_protocol)]
        if self.sasl_mechanism is not None:
            parts.append(str(self.sasl_mechanism))
        if self.sasl_username:
            parts.append(f"user {self.sasl_username}")
        if self.oauth_client_id:
            parts.append(f"client {self.oauth_client_id}")
        if self.ssl_certificate_location or self.ssl_certificate_pem:
            parts.append("client certificate")
        return " ".join(parts)


# ---------------------------------------------------------------------- checks (pure)


def check(s: KafkaClientSettings) -> None:
    """Every combination a client could not use, as a `KafkaSettingsError` naming the
    property."""
    protocol = s.security_protocol
    for first, second in (
        ("ssl_ca_location", "ssl_ca_pem"),
        ("ssl_certificate_location", "ssl_certificate_pem"),
        ("ssl_key_location", "ssl_key_pem"),
    ):
        if getattr(s, first) is not None and getattr(s, second) is not None:
            raise KafkaSettingsError(
                f"{FIELD_PROPERTIES[first]} and {FIELD_PROPERTIES[second]} are both set; give one"
            )
    has_cert = s.ssl_certificate_location is not None or s.ssl_certificate_pem is not None
    has_key = s.ssl_key_location is not None or s.ssl_key_pem is not None
    if has_cert != has_key:
        missing = "ssl.key.location" if has_cert else "ssl.certificate.location"
        raise KafkaSettingsError(
            f"{missing} (or its .pem form) is missing: a client certificate needs its key "
            "and a key its certificate"
        )
    if s.ssl_key_password is not None and not has_key:
        raise KafkaSettingsError("ssl.key.password is set but there is no ssl.key.location")
    if not protocol.uses_tls:
        tls = [
            FIELD_PROPERTIES[f]
            for f in (
                "ssl_ca_location",
                "ssl_ca_pem",
                "ssl_certificate_location",
                "ssl_certificate_pem",
                "ssl_key_location",
                "ssl_key_pem",
            )
            if getattr(s, f) is not None
        ]
        if tls:
            raise KafkaSettingsError(
                f"{', '.join(tls)} set but security.protocol is {protocol}, which does not "
                "use TLS (SSL or SASL_SSL does)"
            )
    sasl_fields = [
        f
        for f in (
            "sasl_mechanism",
            "sasl_username",
            "sasl_password",
            "oauth_method",
            "oauth_token_endpoint_url",
            "oauth_client_id",
            "oauth_client_secret",
            "oauth_scope",
        )
        if getattr(s, f) is not None
    ]
    if not protocol.uses_sasl:
        if sasl_fields:
            names = ", ".join(FIELD_PROPERTIES[f] for f in sasl_fields)
            raise KafkaSettingsError(
                f"{names} set but security.protocol is {protocol}, which does not use SASL "
                "(SASL_SSL or SASL_PLAINTEXT does)"
            )
        return
    mechanism = s.sasl_mechanism
    if mechanism is None:
        raise KafkaSettingsError(
            f"sasl.mechanism is missing: security.protocol {protocol} needs one of "
            f"{', '.join(m.value for m in SaslMechanism)}"
        )
    oauth = [f for f in sasl_fields if f.startswith("oauth_")]
    if mechanism is SaslMechanism.OAUTHBEARER:
        for field in ("sasl_username", "sasl_password"):
            if getattr(s, field) is not None:
                raise KafkaSettingsError(
                    f"{FIELD_PROPERTIES[field]} is set but sasl.mechanism is OAUTHBEARER, which "
                    "uses sasl.oauthbearer.client.id and sasl.oauthbearer.client.secret"
                )
        if s.oauth_method != OIDC:
            raise KafkaSettingsError(
                f"sasl.oauthbearer.method is {s.oauth_method or 'missing'}: OAUTHBEARER is "
                "supported with sasl.oauthbearer.method=oidc (the client-credentials flow)"
            )
        for field in ("oauth_token_endpoint_url", "oauth_client_id", "oauth_client_secret"):
            if not _present(getattr(s, field)):
                raise KafkaSettingsError(
                    f"{FIELD_PROPERTIES[field]} is missing: OAUTHBEARER with oidc needs the "
                    "token endpoint, a client id and its secret"
                )
        url = s.oauth_token_endpoint_url or ""
        if not re.match(r"https?://[^/\s]+", url):
            raise KafkaSettingsError(
                f"sasl.oauthbearer.token.endpoint.url {url!r} is not an http(s) URL"
            )
        return
    if oauth:
        names = ", ".join(FIELD_PROPERTIES[f] for f in oauth)
        raise KafkaSettingsError(f"{names} set but sasl.mechanism is {mechanism}, not OAUTHBEARER")
    if not s.sasl_username:
        raise KafkaSettingsError(f"sasl.username is missing: sasl.mechanism {mechanism} needs it")
    if not _present(s.sasl_password):
        raise KafkaSettingsError(
            f"sasl.password is missing: sasl.mechanism {mechanism} needs it "
            f"(user {s.sasl_username})"
        )


def _present(value: str | SecretStr | None) -> bool:
    if isinstance(value, SecretStr):
        return bool(value.get_secret_value())
    return bool(value)


def _parse_value(key: str, value: str) -> Any:
    if key == "security.protocol":
        try:
            return SecurityProtocol(value.upper())
        except ValueError:
            raise KafkaSettingsError(
                f"security.protocol {value!r} is not one of "
                f"{', '.join(p.value for p in SecurityProtocol)}"
            ) from None
    if key == "sasl.mechanism":
        try:
            return SaslMechanism(value.upper())
        except ValueError:
            raise KafkaSettingsError(
                f"sasl.mechanism {value!r} is not supported (supported: "
                f"{', '.join(m.value for m in SaslMechanism)})"
            ) from None
    if key == "sasl.oauthbearer.method":
        if value.lower() != OIDC:
            raise KafkaSettingsError(
                f"sasl.oauthbearer.method {value!r} is not supported: use oidc "
                "(the client-credentials flow against sasl.oauthbearer.token.endpoint.url)"
            )
        return OIDC
    if key == "ssl.endpoint.identification.algorithm":
        if value.lower() not in ("https", "none"):
            raise KafkaSettingsError(
                f"ssl.endpoint.identification.algorithm {value!r} is not https or none"
            )
        return value.lower() == "https"
    if key in SECRET_PROPERTIES:
        return SecretStr(value)
    return value


def _settings_error(error: ValidationError) -> KafkaSettingsError:
    for detail in error.errors():
        cause = (detail.get("ctx") or {}).get("error")
        if isinstance(cause, KafkaSettingsError):
            return cause
    first = error.errors()[0]
    field = str(first["loc"][0]) if first["loc"] else "?"
    return KafkaSettingsError(f"{FIELD_PROPERTIES.get(field, field)}: {first['msg']}")


# ---------------------------------------------------------------------- sasl.jaas.config


def _merge_jaas(fields: dict[str, Any], jaas: str) -> None:
    module, options = parse_jaas_config(jaas)
    if module not in LOGIN_MODULES:
        raise KafkaSettingsError(
            f"{JAAS_PROPERTY}: login module {module} is not supported (supported: "
            f"{', '.join(LOGIN_MODULES)})"
        )
    implied = LOGIN_MODULES[module]
    given = fields.get("sasl_mechanism")
    if implied is None:  # SCRAM
        if given not in (SaslMechanism.SCRAM_SHA_256, SaslMechanism.SCRAM_SHA_512):
            raise KafkaSettingsError(
                f"{JAAS_PROPERTY} uses ScramLoginModule: sasl.mechanism must be SCRAM-SHA-256 "
                f"or SCRAM-SHA-512 (it is {given or 'missing'})"
            )
    elif given is None:
        fields["sasl_mechanism"] = implied
    elif given is not implied:
        raise KafkaSettingsError(
            f"{JAAS_PROPERTY} uses {module.rsplit('.', 1)[-1]} but sasl.mechanism is {given}"
        )
    if implied is SaslMechanism.OAUTHBEARER:
        wanted = {"clientId": "oauth_client_id", "clientSecret": "oauth_client_secret"}
        wanted["scope"] = "oauth_scope"
        fields.setdefault("oauth_method", OIDC)
    else:
        wanted = {"username": "sasl_username", "password": "sasl_password"}
    for option, field in wanted.items():
        if option not in options:
            continue
        if field in fields:
            raise KafkaSettingsError(
                f"{JAAS_PROPERTY} and {FIELD_PROPERTIES[field]} both give the {option}; give one"
            )
        value = options[option]
        fields[field] = SecretStr(value) if FIELD_PROPERTIES[field] in SECRET_PROPERTIES else value


# Hand-written: no maintained Python package parses JAAS configuration. The grammar is
# Java's ConfigFile/JaasConfig: `<LoginModuleClass> <flag> (<key>=<value>)* ;` where a value
# is a bare word or a double-quoted string with backslash escapes.
_JAAS_TOKEN = re.compile(
    r'\s*(?:(?P<quoted>"(?:[^"\\]|\\.)*")|(?P<punct>[=;])|(?P<word>[^\s=;"]+))', re.S
)
_FLAGS: Final = frozenset({"required", "requisite", "sufficient", "optional"})
_ESCAPES: Final = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}


def parse_jaas_config(text: str) -> tuple[str, dict[str, str]]:
    """`(login module class, options)` of one JAAS entry, e.g.
    `...ScramLoginModule required username="alice" password="s3\\"cret";`."""
    tokens: list[tuple[str, str]] = []
    position = 0
    text = text.strip()
    while position < len(text):
        match = _JAAS_TOKEN.match(text, position)
        if match is None or match.end() == position:
            if text[position:].strip() == "":
                break
            raise KafkaSettingsError(
                f"{JAAS_PROPERTY}: cannot read it at character {position + 1} "
                "(an unterminated quote?)"
            )
        position = match.end()
        kind = match.lastgroup or "word"
        value = match.group(kind)
        if kind == "quoted":
            value = _unescape(value[1:-1])
        tokens.append((kind, value))
    if len(tokens) < 3 or tokens[0][0] != "word" or tokens[1][0] != "word":
        raise KafkaSettingsError(
            f"{JAAS_PROPERTY}: expected '<LoginModule> required key=\"value\" ... ;'"
        )
    module, flag = tokens[0][1], tokens[1][1]
    if flag not in _FLAGS:
        raise KafkaSettingsError(
            f"{JAAS_PROPERTY}: {flag!r} is not a control flag (required, requisite, "
            "sufficient, optional)"
        )
    if tokens[-1] != ("punct", ";"):
        raise KafkaSettingsError(f"{JAAS_PROPERTY}: the entry must end with ';'")
    options: dict[str, str] = {}
    body = tokens[2:-1]
    index = 0
    while index < len(body):
        if (
            index + 2 >= len(body)
            or body[index][0] != "word"
            or body[index + 1] != ("punct", "=")
            or body[index + 2][0] == "punct"
        ):
            raise KafkaSettingsError(
                f"{JAAS_PROPERTY}: expected key=value options after {module} {flag}"
            )
        key = body[index][1]
        if key in options:
            raise KafkaSettingsError(f"{JAAS_PROPERTY}: option {key} is given twice")
        options[key] = body[index + 2][1]
        index += 3
    return module, options


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), value, flags=re.S)


def jaas_quote(value: str) -> str:
    """A JAAS option value, double-quoted with the escapes `parse_jaas_config` reads back."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


PLAINTEXT_SETTINGS: Final = KafkaClientSettings()


class KafkaSettingsFile:
    """A settings file read again when it changes (a password or certificate rotated in a
    mounted Secret): `current()` is what the next connection uses. A file that became
    unreadable or invalid keeps the last good settings, with a warning; the first read must
    succeed (`KafkaSettingsError`)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._stamp = self._stat()
        self._settings = KafkaClientSettings.from_file(self.path)

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            stat = self.path.stat()  # follows the symlinks a Secret volume swaps
        except OSError:
            return None
        return (stat.st_ino, stat.st_mtime_ns, stat.st_size)

    def current(self) -> KafkaClientSettings:
        stamp = self._stat()
        if stamp is not None and stamp != self._stamp:
            self._stamp = stamp
            try:
                self._settings = KafkaClientSettings.from_file(self.path)
                logger.info("Kafka client settings reloaded from %s", self.path)
            except KafkaSettingsError as error:
                logger.warning("%s; keeping the settings read before", error)
        return self._settings
