import sys

from vllm.entrypoints.cli.main import main

sys.exit(main())
