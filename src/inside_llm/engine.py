"""The live engine's old import point: everything is in inside_llm.live (the loop on the serving core, the pages)."""

from inside_llm.live import *  # noqa: F403
from inside_llm.live import __all__  # noqa: F401
