"""`python -m inside_llm ...` is the same as `inside-llm ...`."""

import sys

from .cli import main

sys.exit(main())
