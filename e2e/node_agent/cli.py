"""The node agent's command line: ``python -m e2e.node_agent --kubeconfig ... --workdir ...``."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from e2e.kube_api import Kube
from e2e.node_agent.agent import NodeAgent


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m e2e.node_agent",
        description="Stand in for the kubelet: run pods as local staticfleet processes.",
    )
    parser.add_argument("--kubeconfig", required=True, type=Path)
    parser.add_argument("--workdir", required=True, type=Path)
    parser.add_argument("--node-name", default="e2e-node")
    parser.add_argument("--node-ip", default=None, help="default: the first non-loopback IPv4")
    parser.add_argument("--log-level", default="INFO")
    return parser.parse_args(argv)


async def amain(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with await Kube.connect(args.kubeconfig) as kube:
        agent = NodeAgent(kube, args.workdir, node_name=args.node_name, node_ip=args.node_ip)
        await agent.run(stop)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr,
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    asyncio.run(amain(args))
    return 0
