"""The PNG is written and is a PNG."""

from __future__ import annotations

import struct

from staticfleet.demo.record import Marker, Step
from staticfleet.demo.timeline import TimelinePanel, render
from tests.demo.rows import event, log, partitions

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_render_writes_a_png(tmp_path):
    logs = [
        log("member-0", event(0, "started"), event(100, "assigned", 0, 1), event(900, "stopped")),
        log(
            "member-1",
            event(0, "started"),
            event(100, "assigned", 2, 3),
            event(400, "revoked", 2, 3),
            event(401, "stopped"),
        ),
        log("member-1", event(600, "started"), event(700, "assigned", 2, 3), incarnation=2),
    ]
    panel = TimelinePanel(
        title="(2) a static restart",
        logs=logs,
        partitions=partitions(4),
        fleet_start_ms=0,
        window_start_ms=150,
        window_end_ms=1000,
        steps=[Step("restart member-1", 300, 800)],
        markers=[Marker(300, "stop"), Marker(310, "close by")],
    )
    path = tmp_path / "out" / "timeline.png"
    render([panel, panel], path)
    width, height = png_size(path)
    assert width > 500 and height > 300
