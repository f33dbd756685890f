"""python -m a800vllm: see a800vllm.cli."""

import sys

from .cli import main

sys.exit(main())
