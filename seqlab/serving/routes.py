"""The HTTP routes of the autocomplete server and the JSON shapes they take and give.

    GET    /              the compose page (seqlab/serving/static/), opened with the printed link's one-time
                          `?code=` (`?token=` under --allow-remote)
    POST   /login         {code} from the page's own origin -> {credential}: the code is spent, the page
                          credential counts as the person for this launch (`login_codes.py`)
    GET    /health        503 while the run loads, then 200; the model's description only to a caller
    POST   /v1/complete   {prefix, subject, session?, max_words, sentence, min_confidence?, beam, context?} -> a
                          `Suggestion` and the `session` to name next time
    POST   /v1/events     {id, kind: shown|accepted|dismissed, accepted_chars, typed_through_chars} -> appended
                          to events.jsonl (inserted characters and those typed by hand through the ghost)
    POST   /v1/why        {prefix, subject, text} -> what the model looked at for that suggestion (`why.explain`)
    GET    /v1/stats      acceptance rate and latency percentiles since start
    POST   /v1/sent       {subject, body, context?}: an email the person finished; kept (what they wrote of
                          it) and learned from only under --learn (409 otherwise: without it the server
                          stores no text); capped in size (413), rate (429) and store size (507); one
                          already read from the Sent folder (--sent) is not stored again ({"stored": false})
    POST   /v1/pair/challenge   from a browser extension -> {nonce}: a one-time nonce to pair over
    POST   /v1/pair       {name, server_nonce, client_nonce, proof}: a browser extension proves it holds the
                          pasted secret -> {id, origin, proof}, the server's proof back (`signing.py`)
    DELETE /v1/pair       signed by a paired extension: forget its pairing

Who may call what is decided before any route runs (`access.AccessGuard`); a route finds the caller in
`request.scope[CALLER]`. Sessions are named by the server (`new_session_id`) and kept per caller, so one
caller can never name, and so probe, another's. More than `max_queue` requests waiting get 503 with
Retry-After instead of a growing wait. Errors are JSON `{"error": sentence, "field": name}` (`limits.error`).
"""

from __future__ import annotations

import asyncio
import hmac
import re
from pathlib import Path
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from seqlab.generation.complete import MAX_SENTENCE_WORDS
from seqlab.generation.phrases import unblended
from seqlab.serving.access import CALLER, AccessPolicy, Caller
from seqlab.serving.credentials import is_extension_origin
from seqlab.serving.engine import new_session_id
from seqlab.serving.limits import error
from seqlab.serving.personal import Forgotten, NothingOwn, StoreFull, TooLong, store_sent
from seqlab.serving.signing import b64, pairing_client_proof, pairing_secret, pairing_server_proof, unb64
from seqlab.serving.state import ServerState, run_unless_gone
from seqlab.serving.why import explain, told_by_source

STATIC = Path(__file__).resolve().parent / "static"
MAX_BODY_BYTES = 64 * 1024

router = APIRouter()


class CompleteRequest(BaseModel):
    """One keystroke's question: the email so far (subject and body) and how to answer."""

    model_config = ConfigDict(extra="forbid")
    prefix: str = Field(max_length=MAX_BODY_BYTES, description="the body typed so far")
    subject: str = Field("", max_length=2000)
    session: str | None = Field(None, min_length=1, max_length=128,
                                description="the session the last answer named: its kept model state is reused; "
                                "omit it, or name an unknown one, and a new session starts")
    max_words: int = Field(3, ge=1, le=MAX_SENTENCE_WORDS,
                           description="the most words to suggest; with `sentence`, a cap on the sentence")
    sentence: bool = Field(False, description="run the suggestion to the end of its sentence or line (up to "
                           "max_words) when the model is sure of it; the compose page and the extension ask so")
    min_confidence: float | None = Field(None, ge=0.0, le=1.0,
                                         description="default: --min-confidence, else the run's calibrated threshold")
    beam: int = Field(1, ge=1, le=8)
    context: str | None = Field(None, max_length=MAX_BODY_BYTES,
                                description="the message being answered (plain text or a whole message): "
                                "its names, figures and phrases are offered where the reply types them, and a "
                                "model trained with a model.context also reads it")


class CompleteResponse(BaseModel):
    id: str
    text: str
    confidence: float
    words: int
    latency_ms: float
    cut_chars: int
    threshold: float
    source: str = Field("model", description="who proposed it: model, memory (the person's earlier mail) or "
                        "reply (the message being answered)")
    session: str = Field(description="name this session in the next request to reuse its state")


class WhyRequest(BaseModel):
    """A suggestion to explain: the email it was asked for and the text that was shown."""

    model_config = ConfigDict(extra="forbid")
    prefix: str = Field(max_length=MAX_BODY_BYTES, description="the body the suggestion was asked for")
    subject: str = Field("", max_length=2000)
    text: str = Field(min_length=1, max_length=2000, description="the suggestion that was shown")
    id: str | None = Field(None, min_length=1, max_length=64, description="its id: says where it came from")


class EventRequest(BaseModel):
    """What the page did with a suggestion."""

    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1, max_length=64)
    kind: Literal["shown", "accepted", "dismissed"]
    accepted_chars: int = Field(0, ge=0, le=MAX_BODY_BYTES,
                                description="characters of the suggestion the page inserted (Tab, Ctrl+Right)")
    typed_through_chars: int = Field(0, ge=0, le=MAX_BODY_BYTES,
                                     description="characters of it the writer typed by hand while it showed them")


class SentRequest(BaseModel):
    """An email the person finished writing (and sent): what the server may learn from under --learn."""

    model_config = ConfigDict(extra="forbid")
    subject: str = Field("", max_length=2000)
    body: str = Field(min_length=1, max_length=MAX_BODY_BYTES)
    context: str | None = Field(None, max_length=MAX_BODY_BYTES, description="the message it answered")


class PairRequest(BaseModel):
    """An extension asking to be paired: a label the person will recognise in the list of pairings, and its
    proof over a challenge that it holds the secret of the URL `seqlab serve` printed (`signing.py`)."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field("browser extension", min_length=1, max_length=200)
    server_nonce: str = Field(min_length=16, max_length=128, description="what /v1/pair/challenge gave")
    client_nonce: str = Field(min_length=16, max_length=128, pattern=r"^[A-Za-z0-9_-]+$")
    proof: str = Field(min_length=43, max_length=44, description="HMAC(pasted secret, pair-client, origin, nonces)")


class LoginRequest(BaseModel):
    """The compose page trading the one-time code of the link it was opened with for its credential."""

    model_config = ConfigDict(extra="forbid")
    code: str = Field(min_length=1, max_length=128)


@router.get("/", include_in_schema=False)
async def page(request: Request) -> Any:
    s: ServerState = request.app.state.s
    if not s.config.allow_remote:
        return FileResponse(STATIC / "compose.html", media_type="text/html")
    # remote: the page's own files need the token too, and a <script src> can carry it only in its URL
    html = (STATIC / "compose.html").read_text(encoding="utf-8")
    token = request.query_params.get("token", "")
    return HTMLResponse(re.sub(r'(href|src)="(/static/[^"?]+)"', rf'\1="\2?token={token}"', html)
                        if re.fullmatch(r"[A-Za-z0-9_-]+", token) else html)


@router.post("/login", include_in_schema=False)
async def login(req: LoginRequest, request: Request) -> Any:
    """Trade the printed link's one-time code for a page credential (`login_codes.py`); the code is spent,
    and the person's terminal gets a fresh link."""
    s: ServerState = request.app.state.s
    # the gate already refused other web pages; a request without an Origin is no compose page either
    if (request.headers.get("origin") or "").lower() != f"http://{request.headers.get('host', '')}".lower():
        return error(403, "only the compose page logs in with a code")
    credential = await asyncio.to_thread(s.config.login.login, req.code)  # the listener writes server.json
    if credential is None:
        return error(401, "this link was used already or is not this server's: open the newest link "
                     "`seqlab serve` printed")
    return {"credential": credential}


def caller_of(request: Request) -> Caller | None:
    """Who the gate found the request came from (None: no credential, which only /health admits)."""
    return request.scope.get(CALLER)


@router.get("/health")
async def health(request: Request) -> JSONResponse:
    s: ServerState = request.app.state.s
    if s.failed:  # why it failed names files of the run: only for a caller
        return JSONResponse({"status": "failed", **({"error": s.failed} if caller_of(request) else {})},
                            status_code=503)
    if s.engine is None:
        return JSONResponse({"status": "loading"}, status_code=503, headers={"Retry-After": "1"})
    if caller_of(request) is None:  # anyone on the machine may ask whether it is up, and learn nothing else
        return JSONResponse({"status": "ok"})
    return JSONResponse({"status": "ok", "model": s.info, "learning": _learning(s)})


def _learning(s: ServerState) -> dict[str, Any] | bool:
    """False without --learn; else what the learner has done (emails stored, steps, swaps), and with --sent
    how the Sent folder is read."""
    if s.learner is None:
        return False
    out = s.learner.describe()
    if s.sent_folder is not None:
        out["sent_folder"] = s.sent_folder.describe()
    return out


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

    # the store's key joins the caller and the session: a name is only good to the caller it was issued to
    caller = caller_of(request)
    owner = caller.name if caller is not None else ""
    session = req.session if req.session and f"{owner}\x00{req.session}" in engine.sessions else new_session_id()
    key = f"{owner}\x00{session}"

    def work() -> Any:
        return engine.complete(req.prefix, req.subject, key, max_words=req.max_words, sentence=req.sentence,
                               min_confidence=req.min_confidence, beam=req.beam, context=req.context)

    result = await run_unless_gone(s, request, work)
    if result is None:  # the client left before its turn: nothing to answer
        return JSONResponse({"error": "client disconnected"}, status_code=499)
    s.stats.record_completion(result.latency_ms, shown=bool(result.text), reused_tokens=result.reused_tokens)
    s.issued.add(result.id)
    if s.events is not None:
        s.events.record_completion(result.id, result.latency_ms, bool(result.text), result.confidence,
                                   result.words)
    # a response made here skips FastAPI's second validation of it against CompleteResponse (which still
    # documents it in the OpenAPI schema): a Suggestion's public fields and the session are exactly those
    return JSONResponse({**result.to_dict(), "session": session})


@router.post("/v1/why", responses={413: {"description": "body too large"}, 422: {"description": "bad field"},
                                   503: {"description": "loading, or the queue half full"}})
async def why(req: WhyRequest, request: Request) -> Any:
    s: ServerState = request.app.state.s
    if s.engine is None:
        return _not_ready(s)
    if s.waiting >= max(1, s.config.max_queue // 2):  # not latency-critical: keystrokes keep half the queue
        return error(503, "the model is busy with suggestions; ask why again in a moment", retry_after=1)
    engine = s.engine
    caller = caller_of(request)
    told = told_by_source(engine, req.id, req.subject, req.prefix, req.text,
                          show_origin=caller is not None and caller.kind == "person")
    if told is not None:  # the person's earlier mail or the original: no model to look into
        return told
    result = await run_unless_gone(
        s, request, lambda: explain(unblended(engine.model), engine.tokenizer, req.subject, req.prefix, req.text))
    if result is None:  # the client left before its turn: nothing to answer
        return JSONResponse({"error": "client disconnected"}, status_code=499)
    return result


@router.post("/v1/events", responses={422: {"description": "bad field, or an id the server did not give lately"}})
async def events(ev: EventRequest, request: Request) -> Any:
    s: ServerState = request.app.state.s
    if not s.issued.take(ev.id):
        return error(422, "id: no suggestion with this id was given lately (or it has had all its events)", "id")
    if s.events is not None:
        s.events.record_event(ev.id, ev.kind, ev.accepted_chars, ev.typed_through_chars)
    s.stats.record_event(ev.kind, ev.accepted_chars, ev.typed_through_chars)
    return {"ok": True}


@router.get("/v1/stats")
async def stats(request: Request) -> dict[str, Any]:
    s: ServerState = request.app.state.s
    store = s.engine.sessions if s.engine is not None else None
    return {**s.stats.snapshot(), "waiting": s.waiting, "sessions": len(store) if store is not None else 0,
            "session_bytes": store.bytes if store is not None else 0,
            "log_dropped": s.events.dropped if s.events is not None else 0,
            "threshold": s.engine.threshold if s.engine is not None else None, "learning": _learning(s)}


@router.post("/v1/sent", responses={409: {"description": "the server was started without --learn"},
                                    413: {"description": "what the person wrote is over the size cap"},
                                    422: {"description": "nothing of the person's own is left once cleaned"},
                                    429: {"description": "too many emails from this caller lately"},
                                    507: {"description": "the store of sent emails is full"}})
async def sent(req: SentRequest, request: Request) -> Any:
    """Keep an email the person finished, to learn from while idle (`seqlab serve --learn`).

    Only what the person wrote is kept: the body without the quoted original and the signature (the cleaner
    `seqlab prepare` gives training mail), the message it answered only for a model that reads one, and who
    stored it (the caller: "person" or the extension's origin). Every call counts against the caller's rate,
    stored or not: a page that can send cannot make the server clean and refuse for it without end."""
    s: ServerState = request.app.state.s
    if s.learner is None or s.personal is None or s.sent_rate is None or s.engine is None:
        if s.engine is None:
            return _not_ready(s)
        return error(409, "this server does not learn from sent mail (start it with --learn); nothing was stored")
    personal, learner, settings = s.personal, s.learner, s.config.learn_settings
    caller = caller_of(request)
    origin = caller.name if caller is not None else "person"
    wait = s.sent_rate.take(origin)
    if wait:
        return error(429, f"more than {settings.sent_burst} emails sent lately; nothing was stored, try again in "
                     f"{wait} s", retry_after=wait)
    context = req.context if req.context and s.engine.reads_context else None  # kept only where it is learned
    folder = s.sent_folder

    def intake() -> tuple[int, str | None]:  # an email read from the Sent folder first is not stored again
        return store_sent(personal, req.subject, req.body, context, origin, settings.max_body_bytes,
                          skip=folder.kept() if folder is not None else frozenset())

    try:  # cleaning (linear regex scans, but up to 64 KiB), reading the store, fsync: off the loop
        count, digest = await asyncio.to_thread(intake)
    except NothingOwn as exc:
        return error(422, f"{exc}; nothing was stored", field="body")
    except TooLong as exc:
        return error(413, f"{exc}; nothing was stored", field="body")
    except StoreFull as exc:
        return error(507, f"{exc}; nothing was stored (`seqlab forget` empties it)")
    except Forgotten as exc:
        return error(409, f"{exc}; nothing was stored")
    if digest is None:
        return {"stored": False, "emails": count, "duplicate": "already read from the Sent folder"}
    learner.notify()
    return {"stored": True, "emails": count}


@router.post("/v1/pair/challenge", responses={403: {"description": "not from a browser extension"}})
async def pair_challenge(request: Request) -> Any:
    """A one-time nonce for an extension to pair over, so that no pairing exchange can be replayed."""
    origin = request.headers.get("origin")
    if origin is None or not is_extension_origin(origin):
        return error(403, "only a browser extension can be paired (its request carries its origin)")
    policy: AccessPolicy = request.app.state.policy
    return {"nonce": policy.pairing_challenge()}


@router.post("/v1/pair", responses={401: {"description": "no proof of the printed URL's secret"},
                                    403: {"description": "not from a browser extension"}})
async def pair(req: PairRequest, request: Request) -> Any:
    """Pair the calling browser extension: it proved it holds the secret of the URL `seqlab serve` printed
    (so the person gave it) without sending it, and its origin is an extension's; it gets a pairing id and
    the server's proof back, and both keep the secret derived from that exchange (`signing.py`)."""
    s: ServerState = request.app.state.s
    policy: AccessPolicy = request.app.state.policy
    origin = request.headers.get("origin")
    if origin is None or s.pairings is None or not is_extension_origin(origin):
        return error(403, "only a browser extension can be paired (its request carries its origin)")
    sn, cn, given = req.server_nonce, req.client_nonce, unb64(req.proof)
    if not policy.take_challenge(sn) or given is None:
        return error(401, "this pairing challenge is unknown or used: pair again")
    pasted = policy.pasted_secret(lambda secret: hmac.compare_digest(
        pairing_client_proof(secret, origin, sn, cn), given))
    if pasted is None:
        return error(401, "the pasted URL is not this server's: paste the one `seqlab serve` printed last")
    made = s.pairings.pair(origin, req.name, lambda pid: pairing_secret(pasted, origin, sn, cn, pid))
    return {"id": made.id, "origin": origin, "proof": b64(pairing_server_proof(pasted, origin, sn, cn, made.id))}


@router.delete("/v1/pair")
async def unpair(request: Request) -> Any:
    """Forget the calling extension's pairing (its signed requests stop counting at once)."""
    s: ServerState = request.app.state.s
    caller = caller_of(request)
    if caller is None or caller.pairing is None or s.pairings is None:
        return error(403, "only a paired extension can unpair itself, with a signed request")
    return {"ok": s.pairings.unpair(caller.pairing)}


def _not_ready(s: ServerState) -> JSONResponse:
    """503 while the run loads (or after it failed to load: /health says why)."""
    return error(503, "the model failed to load" if s.failed else "the model is still loading", retry_after=1)
