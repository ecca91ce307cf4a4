"""The PNG: partition ownership per member over time, one panel per scenario.

Each member slot is a lane; a bar means the slot's process held partitions, colored by how
many. A thin grey line under it shows when a process of that slot was running, so a
restart is visible as a break. The bottom lane shows how many partitions had no owner.
Everything drawn comes from the member event logs (`ownership` functions).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from staticfleet.demo import ownership as om
from staticfleet.demo.ownership import MemberLog, Partition
from staticfleet.demo.record import Marker, Step

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.colors import Colormap, Normalize


@dataclass(frozen=True, slots=True)
class TimelinePanel:
    title: str
    logs: Sequence[MemberLog]
    partitions: Sequence[Partition]
    fleet_start_ms: int
    window_start_ms: int
    window_end_ms: int
    steps: Sequence[Step]
    markers: Sequence[Marker]


def _slot_key(slot: str) -> tuple[int, str]:
    # member-10 after member-9
    number = slot.rsplit("-", 1)[-1]
    return (int(number), slot) if number.isdigit() else (1 << 30, slot)


def render(panels: Sequence[TimelinePanel], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # no display; must precede pyplot
    import matplotlib.pyplot as plt
    from matplotlib import colormaps
    from matplotlib.colors import BoundaryNorm

    slots_per_panel = [sorted({log.owner for log in p.logs}, key=_slot_key) for p in panels]
    most = max(
        (
            count
            for panel in panels
            for owner in {log.owner for log in panel.logs}
            for _s, _e, count in om.count_steps(
                om.all_holdings([log for log in panel.logs if log.owner == owner]),
                panel.window_end_ms,
            )
        ),
        default=1,
    )
    boundaries = list(range(1, most + 2))
    cmap = colormaps["viridis"].resampled(len(boundaries) - 1)
    norm = BoundaryNorm(boundaries, cmap.N)
    heights = [len(slots) + 1.6 for slots in slots_per_panel]
    figure, axes = plt.subplots(
        len(panels),
        1,
        figsize=(14, 0.42 * sum(heights) + 1.5),
        gridspec_kw={"height_ratios": heights},
        squeeze=False,
        layout="constrained",
    )
    # One time scale for every panel, so durations compare at a glance (4a against 4b).
    longest_s = max((p.window_end_ms - p.fleet_start_ms) / 1000 for p in panels)
    for axis, panel, slots in zip(axes[:, 0], panels, slots_per_panel, strict=True):
        _draw_panel(axis, panel, slots, cmap, norm, longest_s + 0.5)
    colorbar = figure.colorbar(
        plt.cm.ScalarMappable(norm=norm, cmap=cmap),
        ax=axes[:, 0].tolist(),
        fraction=0.02,
        pad=0.01,
        ticks=[b + 0.5 for b in boundaries[:-1]],
    )
    colorbar.ax.set_yticklabels([str(b) for b in boundaries[:-1]])
    colorbar.set_label("partitions held by the member")
    figure.suptitle(
        "staticfleet demo: partition ownership per member (from the members' event logs)",
        fontsize=13,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)


def _draw_panel(
    axis: Axes,
    panel: TimelinePanel,
    slots: list[str],
    cmap: Colormap,
    norm: Normalize,
    span_s: float,
) -> None:
    from matplotlib import colormaps

    origin = panel.fleet_start_ms

    def seconds(ts: int) -> float:
        return (ts - origin) / 1000

    end = panel.window_end_ms
    lanes = {slot: len(slots) - index for index, slot in enumerate(slots)}  # top to bottom
    for slot, y in lanes.items():
        logs = [log for log in panel.logs if log.owner == slot]
        for log in logs:
            life = om.process_lifetimes(log, end)
            if life is not None:
                axis.plot(
                    [seconds(life[0]), seconds(min(life[1], end))],
                    [y - 0.36, y - 0.36],
                    color="0.55",
                    linewidth=1.5,
                    solid_capstyle="butt",
                )
        steps = om.count_steps(om.all_holdings(logs), end)
        axis.broken_barh(
            [(seconds(s), (e - s) / 1000) for s, e, _count in steps],
            (y - 0.28, 0.56),
            facecolors=[cmap(norm(count)) for _s, _e, count in steps],
        )
    held = om.all_holdings(panel.logs)
    unowned = om.unowned_steps(held, panel.partitions, panel.window_start_ms, end)
    total = max(len(panel.partitions), 1)
    if unowned:
        reds = colormaps["Reds"]
        axis.broken_barh(
            [(seconds(s), (e - s) / 1000) for s, e, _count in unowned],
            (-0.28, 0.56),
            facecolors=[reds(0.35 + 0.65 * count / total) for _s, _e, count in unowned],
        )
    axis.axvspan(0, seconds(panel.window_start_ms), color="0.93", zorder=0)
    axis.text(
        seconds(panel.window_start_ms) / 2,
        len(slots) + 0.55,
        "fleet forming",
        ha="center",
        va="bottom",
        fontsize=8,
        color="0.45",
    )
    for step in panel.steps:
        axis.axvline(seconds(step.start_ms), color="0.6", linestyle=":", linewidth=0.8)
    # Markers close together (members gone, then the LeaveGroup a few ms later) get their
    # labels on alternate rows so they stay legible.
    previous_x: float | None = None
    row = 0
    for marker in sorted(panel.markers, key=lambda m: m.ts_ms):
        x = seconds(marker.ts_ms)
        row = row + 1 if previous_x is not None and x - previous_x < 0.08 * span_s else 0
        previous_x = x
        axis.axvline(x, color="tab:red", linestyle="--", linewidth=1)
        axis.text(
            x,
            len(slots) + 0.45 - 0.45 * (row % 2),
            f" {marker.label}",
            color="tab:red",
            fontsize=8,
            va="bottom",
            bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 0.5},
        )
    axis.set_yticks([*lanes.values(), 0], [*lanes.keys(), "no owner"])
    axis.set_ylim(-0.7, len(slots) + 1.1)
    axis.set_xlim(0, span_s)
    axis.set_title(panel.title, loc="left", fontsize=10)
    axis.grid(axis="x", color="0.9")
    axis.set_xlabel("seconds since the fleet started (dotted: a step begins)", fontsize=8)
