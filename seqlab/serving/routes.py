"""The HTTP routes of the autocomplete server and the JSON shapes they take and give.

    GET  /              the compose page (seqlab/serving/static/)
    GET  /health        503 while the run loads, then 200 with the model's description
    POST /v1/complete   {prefix, subject, session?, max_words, min_confidence?, beam, context?} -> a `Suggestion`
    POST /v1/events     {id, kind: shown|accepted|dismissed, accepted_chars} -> appended to events.jsonl
    POST /v1/why        {prefix, subject, text} -> what the model looked at for that suggestion (`why.explain`)
    GET  /v1/stats      acceptance rate and latency percentiles since start

More than `max_queue` requests waiting get 503 with Retry-After instead of a growing wait. Errors are
JSON `{"error": sentence, "field": name}` (`limits.error`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from seqlab.generation.phrases import unblended
from seqlab.serving.limits import error
from seqlab.serving.state import ServerState, run_unless_gone
from seqlab.serving.why import explain

STATIC = Path(__file__).resolve().parent / "static"
MAX_BODY_BYTES = 64 * 1024

router = APIRouter()


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
    context: str | None = Field(None, max_length=MAX_BODY_BYTES,
                                description="the message being answered (plain text or a whole message); "
                                "read by a model trained with model.cross_attention=true")


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


@router.get("/", include_in_schema=False)
async def page() -> FileResponse:
    return FileResponse(STATIC / "compose.html", media_type="text/html")


@router.get("/health")
async def health(request: Request) -> JSONResponse:
    s: ServerState = request.app.state.s
    if s.failed:
        return JSONResponse({"status": "failed", "error": s.failed}, status_code=503)
    if s.engine is None:
        return JSONResponse({"status": "loading"}, status_code=503, headers={"Retry-After": "1"})
    return JSONResponse({"status": "ok", "model": s.info})


@router.post("/v1/complete", response_model=CompleteResponse,
             responses={413: {"description": "body too large"}, 422: {"description": "bad field"},
                        503: {"description": "loading or queue full"}})
async def complete(req: CompleteRequest, request: Request) -> Any:
    s: ServerState = request.app.state.s
    if s.engine is None:
        return _not_ready(s)
    if s.waiting >= s.config.max_queue:
        s.stats.incr_rejected()
        return error(503, f"more than {s.config.max_queue} requests are waiting; try again", retry_after=1)
    engine = s.engine
    if req.context and not engine.reads_context:
        return error(422, "this model reads no context (it was trained without model.cross_attention=true)",
                     field="context")

    def work() -> Any:
        return engine.complete(req.prefix, req.subject, req.session, max_words=req.max_words,
                               min_confidence=req.min_confidence, beam=req.beam, context=req.context)

    result = await run_unless_gone(s, request, work)
    if result is None:  # the client left before its turn: nothing to answer
        return JSONResponse({"error": "client disconnected"}, status_code=499)
    s.stats.record_completion(result.latency_ms, shown=bool(result.text))
    if s.events is not None:
        s.events.record_completion(result.id, result.latency_ms, bool(result.text), result.confidence,
                                   result.words)
    # a response made here skips FastAPI's second validation of it against CompleteResponse (which still
    # documents it in the OpenAPI schema): a Suggestion has exactly those fields
    return JSONResponse(result.to_dict())


@router.post("/v1/why", responses={413: {"description": "body too large"}, 422: {"description": "bad field"},
                                   503: {"description": "loading, or the queue half full"}})
async def why(req: WhyRequest, request: Request) -> Any:
    s: ServerState = request.app.state.s
    if s.engine is None:
        return _not_ready(s)
    if s.waiting >= max(1, s.config.max_queue // 2):  # not latency-critical: keystrokes keep half the queue
        return error(503, "the model is busy with suggestions; ask why again in a moment", retry_after=1)
    engine = s.engine
    result = await run_unless_gone(
        s, request, lambda: explain(unblended(engine.model), engine.tokenizer, req.subject, req.prefix, req.text))
    if result is None:  # the client left before its turn: nothing to answer
        return JSONResponse({"error": "client disconnected"}, status_code=499)
    return result


@router.post("/v1/events")
async def events(ev: EventRequest, request: Request) -> dict[str, bool]:
    s: ServerState = request.app.state.s
    if s.events is not None:
        s.events.record_event(ev.id, ev.kind, ev.accepted_chars)
    s.stats.record_event(ev.kind, ev.accepted_chars)
    return {"ok": True}


@router.get("/v1/stats")
async def stats(request: Request) -> dict[str, Any]:
    s: ServerState = request.app.state.s
    sessions = len(s.engine.sessions) if s.engine is not None else 0
    return {**s.stats.snapshot(), "waiting": s.waiting, "sessions": sessions,
            "threshold": s.engine.threshold if s.engine is not None else None}


def _not_ready(s: ServerState) -> JSONResponse:
    """503 while the run loads (or after it failed to load: /health says why)."""
    return error(503, "the model failed to load" if s.failed else "the model is still loading", retry_after=1)
