"""`python -m proxy.mirror.worker`: the capture worker's entry point (started by `link`)."""

import sys

from proxy.mirror.worker.process import main

sys.exit(main())
