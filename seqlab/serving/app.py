"""The local autocomplete server: FastAPI routes around one `CompletionEngine` on one worker thread.

    GET  /              the compose page (seqlab/serving/static/)
    GET  /health        503 while the run loads, then 200 with the model's description
    POST /v1/complete   {prefix, subject, session?, max_words, min_confidence?, beam} -> a `Suggestion`
    POST /v1/events     {id, kind: shown|accepted|dismissed, accepted_chars} -> appended to events.jsonl
    POST /v1/why        {prefix, subject, text} -> what the model looked at for that suggestion (`why.explain`)
    GET  /v1/stats      acceptance rate and latency percentiles since start

Model work runs on one worker thread with a fixed torch thread count: requests queue in order, and more
than `max_queue` waiting get 503 with Retry-After instead of a growing wait. A request whose client has
gone before its turn is dropped without running. Errors are JSON `{"error": sentence, "field": name}`:
413 for a body over 64 KiB, 422 for a bad or out-of-range field. Nothing here opens a connection to
anywhere: the page, the model and the logs are local.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from seqlab.serving.engine import CompletionEngine
from seqlab.serving.events import EventLog, ServingStats
from seqlab.serving.limits import BodyLimit, error
from seqlab.serving.why import explain

STATIC = Path(__file__).resolve().parent / "static"
MAX_BODY_BYTES = 64 * 1024


class CompleteRequest(BaseModel):
    """One keystroke's question: the email so far (subject and body) and how to answer."""

    model_config = ConfigDict(extra="forbid")
    prefix: str = Field(max_length=MAX_BODY_BYTES, description="the body typed so far")
    subject: str = Field("", max_length=2000)
    session: str | None = Field(None, min_length=1, max_length=128,
                                description="reuse the model state kept for this writer; omit to encode from scratch")
    max_words: int = Field(3, ge=1, le=8)
    min_confidence: float | None = Field(None, ge=0.0, le=1.0,
                                         description="default: --min-confidence, else the run's calibrated threshold")
    beam: int = Field(1, ge=1, le=8)


class CompleteResponse(BaseModel):
    id: str
    text: str
    confidence: float
    words: int
    latency_ms: float
    reused_tokens: int
    cut_chars: int
    threshold: float


class WhyRequest(BaseModel):
    """A suggestion to explain: the email it was asked for and the text that was shown."""

    model_config = ConfigDict(extra="forbid")
    prefix: str = Field(max_length=MAX_BODY_BYTES, description="the body the suggestion was asked for")
    subject: str = Field("", max_length=2000)
    text: str = Field(min_length=1, max_length=2000, description="the suggestion that was shown")


class EventRequest(BaseModel):
    """What the page did with a suggestion."""

    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1, max_length=64)
    kind: Literal["shown", "accepted", "dismissed"]
    accepted_chars: int = Field(0, ge=0, le=MAX_BODY_BYTES)


@dataclass
class ServerConfig:
    """Everything `seqlab serve` passes to the app."""

    run_dir: Path
    threads: int = 1
    max_queue: int = 8
    min_confidence: float | None = None
    log_dir: Path | None = None
    max_sessions: int = 256
    on_ready: Callable[[dict[str, Any]], None] | None = None  # told the model's description once loaded


@dataclass
class ServerState:
    """What the routes share; `engine` is None while the run loads, `failed` says why loading failed."""

    config: ServerConfig
    worker: ThreadPoolExecutor
    stats: ServingStats = field(default_factory=ServingStats)
    engine: CompletionEngine | None = None
    info: dict[str, Any] = field(default_factory=dict)
    failed: str | None = None
    waiting: int = 0
    events: EventLog | None = None


def load_engine(config: ServerConfig) -> tuple[CompletionEngine, dict[str, Any]]:
    """Load the run and choose the threshold: --min-confidence, else calibration.json, else 0."""
    from seqlab.evaluation.calibration import load_calibration
    from seqlab.runs.load import load_run

    model, tok, _ = load_run(config.run_dir, "cpu")
    source = "--min-confidence"
    threshold = config.min_confidence
    if threshold is None:
        calibration = load_calibration(config.run_dir)
        if calibration is not None:
            threshold, source = float(calibration["threshold"]), "calibration.json"
        else:
            threshold, source = 0.0, "none (run `seqlab calibrate` to choose one for a target coverage)"
    engine = CompletionEngine(model, tok, threshold=threshold, max_sessions=config.max_sessions)
    info = {**engine.describe(), "threshold_source": source, "run_dir": str(config.run_dir)}
    return engine, info


def _start_loading(state: ServerState) -> None:
    """Load on the worker thread, so /health answers 503 meanwhile and the model is built where it runs."""
    def load() -> None:
        try:
            state.engine, state.info = load_engine(state.config)
        except Exception as exc:  # noqa: BLE001 (reported by /health; the server stays up to say so)
            state.failed = f"{type(exc).__name__}: {exc}"
            return
        if state.config.on_ready is not None:
            state.config.on_ready(state.info)

    state.worker.submit(load)


def create_app(config: ServerConfig) -> FastAPI:
    """The FastAPI app for one run; the run starts loading when the app starts."""
    def init_worker() -> None:
        torch.set_num_threads(config.threads)  # fixed: the model never competes with itself for cores

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="seqlab-model", initializer=init_worker)
        log_dir = config.log_dir or config.run_dir / "serve"
        app.state.s = ServerState(config, worker, events=EventLog(log_dir))
        _start_loading(app.state.s)
        try:
            yield
        finally:
            worker.shutdown(wait=False, cancel_futures=True)

    # no /docs or /redoc: those pages load their scripts from a CDN, and nothing here leaves the machine
    app = FastAPI(title="seqlab autocomplete", version="1", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.add_middleware(BodyLimit, max_bytes=MAX_BODY_BYTES)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error(exc.status_code, str(exc.detail))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        loc = [str(p) for p in first.get("loc", ()) if p != "body"]
        name = ".".join(loc) or None
        return error(422, f"{name or 'the body'}: {first.get('msg', 'invalid value')}", name)

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(STATIC / "compose.html", media_type="text/html")

    @app.get("/health")
    async def health(request: Request) -> JSONResponse:
        s: ServerState = request.app.state.s
        if s.failed:
            return JSONResponse({"status": "failed", "error": s.failed}, status_code=503)
        if s.engine is None:
            return JSONResponse({"status": "loading"}, status_code=503, headers={"Retry-After": "1"})
        return JSONResponse({"status": "ok", "model": s.info})

    @app.post("/v1/complete", response_model=CompleteResponse,
              responses={413: {"description": "body too large"}, 422: {"description": "bad field"},
                         503: {"description": "loading or queue full"}})
    async def complete(req: CompleteRequest, request: Request) -> Any:
        s: ServerState = request.app.state.s
        if s.engine is None:
            return error(503, "the model is still loading" if not s.failed else "the model failed to load",
                         retry_after=1)
        if s.waiting >= s.config.max_queue:
            s.stats.incr_rejected()
            return error(503, f"more than {s.config.max_queue} requests are waiting; try again", retry_after=1)
        engine = s.engine

        def work() -> Any:
            return engine.complete(req.prefix, req.subject, req.session, max_words=req.max_words,
                                   min_confidence=req.min_confidence, beam=req.beam)

        result = await _run_unless_gone(s, request, work)
        if result is None:  # the client left before its turn: nothing to answer
            return JSONResponse({"error": "client disconnected"}, status_code=499)
        s.stats.record_completion(result.latency_ms, shown=bool(result.text))
        if s.events is not None:
            s.events.record_completion(result.id, result.latency_ms, bool(result.text), result.confidence,
                                       result.words)
        return result.to_dict()

    @app.post("/v1/why", responses={413: {"description": "body too large"}, 422: {"description": "bad field"},
                                    503: {"description": "loading, or the queue half full"}})
    async def why(req: WhyRequest, request: Request) -> Any:
        s: ServerState = request.app.state.s
        if s.engine is None:
            return error(503, "the model is still loading" if not s.failed else "the model failed to load",
                         retry_after=1)
        if s.waiting >= max(1, s.config.max_queue // 2):  # not latency-critical: keystrokes keep half the queue
            return error(503, "the model is busy with suggestions; ask why again in a moment", retry_after=1)
        engine = s.engine
        result = await _run_unless_gone(
            s, request, lambda: explain(engine.model, engine.tokenizer, req.subject, req.prefix, req.text))
        if result is None:  # the client left before its turn: nothing to answer
            return JSONResponse({"error": "client disconnected"}, status_code=499)
        return result

    @app.post("/v1/events")
    async def events(ev: EventRequest, request: Request) -> dict[str, bool]:
        s: ServerState = request.app.state.s
        if s.events is not None:
            s.events.record_event(ev.id, ev.kind, ev.accepted_chars)
        s.stats.record_event(ev.kind, ev.accepted_chars)
        return {"ok": True}

    @app.get("/v1/stats")
    async def stats(request: Request) -> dict[str, Any]:
        s: ServerState = request.app.state.s
        sessions = len(s.engine.sessions) if s.engine is not None else 0
        return {**s.stats.snapshot(), "waiting": s.waiting, "sessions": sessions,
                "threshold": s.engine.threshold if s.engine is not None else None}

    return app


async def _run_unless_gone(s: ServerState, request: Request, work: Callable[[], Any]) -> Any:
    """Run `work` on the model thread in turn; None if the client disconnected before it started."""
    gone = threading.Event()
    started = threading.Event()

    def guarded() -> Any:
        if gone.is_set():
            return None
        started.set()
        return work()

    s.waiting += 1
    future: Awaitable[Any] = asyncio.wrap_future(s.worker.submit(guarded))
    try:
        watcher = asyncio.ensure_future(_disconnected(request))
        done, _ = await asyncio.wait({asyncio.ensure_future(future), watcher}, return_when=asyncio.FIRST_COMPLETED)
        if watcher in done and not started.is_set():
            gone.set()  # not started yet: the worker will skip it
        watcher.cancel()
        return await future
    finally:
        s.waiting -= 1


async def _disconnected(request: Request) -> None:
    """Return once the client has closed the connection (the body has already been read)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return
