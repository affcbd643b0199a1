"""Measure runs the tour starts against an attached server, when its operator allowed them
(`inside-llm serve --attach-measure`, for all attached servers or the names given): measure.run_load in a task of the
tour's server, its progress counted as each request ends, its summary (measured beside the cost model's prediction,
with the error) kept until the next run.

One run at a time per server: a second while one runs is refused at once (Conflict, in words). The bounds are
measure's (at most MAX_REQUESTS requests, MAX_CONCURRENCY at a time) with a shorter time cap
(MAX_TOUR_TIME_CAP_S) and shorter prompts and answers than the command line allows, since a visitor starts it.
Runs live in this worker process; they are cancelled when the server stops.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from . import measure
from .chat import Failed, _client, model_id
from .targets import Target

MAX_TOUR_TIME_CAP_S = 300.0
DEFAULT_TOUR_TIME_CAP_S = 120.0
MAX_TOUR_PROMPT_TOKENS = 4_096
MAX_TOUR_OUTPUT_TOKENS = 1_024


class Conflict(Exception):
    """A run is already going against this server; str() says so, in words."""


@dataclass
class Job:
    name: str
    requests: int
    concurrency: int
    prompt_tokens: int
    output_tokens: int
    time_cap_s: float
    setup: dict | None
    number: int = 1
    state: str = "starting"  # starting (finding the model), running, done, failed
    model: str | None = None
    ended: int = 0  # requests ended so far, finished or failed
    ok: int = 0
    started: float = field(default_factory=time.monotonic)
    wall_s: float | None = None
    summary: dict | None = None
    error: str | None = None

    def add(self, r: measure.Result) -> None:
        self.ended += 1
        self.ok += bool(r.ok)

    def view(self) -> dict:
        return {
            "name": self.name,
            "number": self.number,
            "state": self.state,
            "model": self.model,
            "requests": self.requests,
            "concurrency": self.concurrency,
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens,
            "time_cap_s": self.time_cap_s,
            "setup": self.setup,
            "ended": self.ended,
            "finished": self.ok,
            "progress": self.ended / self.requests if self.state != "done" else 1.0,
            "elapsed_s": round(self.wall_s if self.wall_s is not None else time.monotonic() - self.started, 3),
            "summary": self.summary,
            "error": self.error,
        }


class Jobs:
    """The latest run per attached server, and the tasks of those still going."""

    def __init__(self):
        self.latest: dict[str, Job] = {}
        self.tasks: dict[str, asyncio.Task] = {}
        self.count = 0

    def view(self, name: str) -> dict | None:
        job = self.latest.get(name)
        return None if job is None else job.view()

    def start(self, target: Target, job: Job, fallback_models: list[str] | None = None) -> Job:
        """Start `job` against `target` now, on the running loop; Conflict when one is going there already."""
        now = self.latest.get(target.name)
        if now is not None and now.state in ("starting", "running"):
            raise Conflict(
                f"A measure run against '{target.name}' is already going ({now.ended} of {now.requests} requests "
                "ended): one at a time per server. Wait for it to finish."
            )
        self.count += 1
        job.number = self.count
        self.latest[target.name] = job
        self.tasks[target.name] = asyncio.get_running_loop().create_task(
            self._run(target, job, fallback_models), name=f"attach-measure-{target.name}"
        )
        return job

    async def _run(self, target: Target, job: Job, fallback_models: list[str] | None) -> None:
        t0 = time.monotonic()
        try:
            async with _client() as client:
                job.model = await model_id(client, target, fallback_models)
            job.state = "running"
            run = await measure.run_load(
                target,
                job.requests,
                job.concurrency,
                job.prompt_tokens,
                job.output_tokens,
                job.time_cap_s,
                model=job.model,
                on_result=job.add,
            )
            job.summary = await asyncio.to_thread(measure.summarize, run, job.setup or {})
            job.summary["base_url"] = None  # the page names the server by its name only
            job.state = "done"
        except Failed as e:
            job.state, job.error = "failed", str(e)
        except measure.Refused as e:
            job.state, job.error = "failed", str(e)
        except Exception as e:  # still this run's failure, in words, never the tour's
            job.state, job.error = "failed", f"The run failed ({type(e).__name__})."
        finally:
            job.wall_s = time.monotonic() - t0

    async def stop(self) -> None:
        for task in self.tasks.values():
            task.cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)
        self.tasks.clear()
