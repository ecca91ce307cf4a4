"""Kafka messages kafka-python 3.0 does not ship (KIP-848): ConsumerGroupDescribe (API key 69)
and ConsumerGroupHeartbeat (API key 68, what our member speaks on the consumer protocol).

Generated, not hand-written: the JSON files beside this module are Kafka's own message
definitions, copied unchanged from kafka-clients 4.4.0 (`common/message/*.json` in its jar,
the version the test broker runs), and kafka-python's `ApiMessage` builds the request and
response classes from them (`load_json=` names this package), exactly as it builds the
messages it ships: the same flexible versions, compact strings and tagged fields, so a
`KafkaConnection` sends and decodes them like any other. A newer Kafka's definition is a
file copy away. (ListGroups v5, with its types filter, is kafka-python's own.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafka.protocol.api_message import ApiMessage

if TYPE_CHECKING:
    # Built at import time from the JSON (fields, versions): opaque to mypy, as kafka-python's
    # own messages are (it ships stubs for those; its classes are indexed by version).
    ConsumerGroupDescribeRequest: Any
    ConsumerGroupDescribeResponse: Any
    ConsumerGroupHeartbeatRequest: Any
    ConsumerGroupHeartbeatResponse: Any
else:

    class ConsumerGroupDescribeRequest(ApiMessage, load_json=__name__):
        pass

    class ConsumerGroupDescribeResponse(ApiMessage, load_json=__name__):
        pass

    class ConsumerGroupHeartbeatRequest(ApiMessage, load_json=__name__):
        pass

    class ConsumerGroupHeartbeatResponse(ApiMessage, load_json=__name__):
        pass


__all__ = [
    "ConsumerGroupDescribeRequest",
    "ConsumerGroupDescribeResponse",
    "ConsumerGroupHeartbeatRequest",
    "ConsumerGroupHeartbeatResponse",
]
