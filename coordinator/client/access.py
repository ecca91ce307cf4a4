"""`AccessError`: a server was reached and refused us, or we refused it; never retried.

The base of the Kafka cluster's refusals (`kafka_errors.py`) and of our coordinator's
certificate being refused (`coordinator_tls.py`): retrying cannot fix an untrusted
certificate or a wrong password, so a member stops on one, naming the cause in `reason`,
instead of retrying for ever as it does for a `TransportError`.
"""

from __future__ import annotations

from typing import ClassVar


class AccessError(Exception):
    """Not retriable; `reason` names the kind (an operator Event reason, a log field)."""

    reason: ClassVar[str] = "AccessError"

    @property
    def message(self) -> str:
        return str(self)
