"""One Settings object, read from INSIDE_LLM_* environment variables once at start-up."""

from __future__ import annotations

import os
from dataclasses import dataclass

from .attach.targets import ENV as ATTACH_ENV
from .attach.targets import MEASURE_ENV, parse_measure, parse_targets

# uvicorn's h11 parser answers a request head (request line + headers) over its limit with a bare 400 and a
# reset connection, before the app sees it. The server runs with this limit, far above max_url_bytes, so a
# long URL reaches the app and gets a JSON 414 instead (cli `serve` and the tests' live server pass it).
MAX_REQUEST_HEAD_BYTES = 1 << 20


@dataclass(frozen=True)
class Settings:
    """Server-wide knobs. `frame_ancestors` applies to non-embed pages; /embed may be framed anywhere."""

    frame_ancestors: str = "'self'"
    max_body_bytes: int = 1_000_000  # request bodies above this get 413
    max_url_bytes: int = 32_768  # a URL (path + query, as sent) above this gets 414; POST for long text
    cache_max_age_s: int = 3600  # responses are pure functions of the URL
    attach: tuple = ()  # attach.targets.Target: the servers the operator attached (INSIDE_LLM_ATTACH, serve --attach)
    attach_measure: tuple = ()  # names of those the tour may start measure runs against (serve --attach-measure)

    @classmethod
    def from_env(cls) -> Settings:
        env = os.environ.get
        attach = parse_targets([env(ATTACH_ENV, "")])
        return cls(
            frame_ancestors=env("INSIDE_LLM_FRAME_ANCESTORS", cls.frame_ancestors),
            max_body_bytes=int(env("INSIDE_LLM_MAX_BODY_BYTES", cls.max_body_bytes)),
            max_url_bytes=int(env("INSIDE_LLM_MAX_URL_BYTES", cls.max_url_bytes)),
            cache_max_age_s=int(env("INSIDE_LLM_CACHE_MAX_AGE_S", cls.cache_max_age_s)),
            attach=attach,
            attach_measure=parse_measure(env(MEASURE_ENV), attach),
        )
