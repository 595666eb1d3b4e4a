"""`python -m proxy` is the same as the `vllm-cutover` console script."""

from __future__ import annotations

import sys

from proxy.cli import main

sys.exit(main())
