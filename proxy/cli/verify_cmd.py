"""`vllm-cutover verify`: the post-upgrade checklist (placeholder until its lines exist)."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    del subparsers
