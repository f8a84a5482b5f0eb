"""The local autocomplete server: the FastAPI app around one `CompletionEngine` on one worker thread.

`create_app(ServerConfig)` builds the app: the gate that admits only the person (`access.py`: Host,
Origin, token, JSON bodies, security headers), the routes (`routes.py`), the body-size limit and JSON
errors (`limits.py`), and a lifespan that starts the model worker and loads the run on it
(`load_engine`), so /health answers 503 until the model is ready. Nothing here opens a connection to
anywhere: the page, the model and the logs are local.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any

import torch
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException
from torch import nn

from seqlab.generation.gate import VALUE_RULES
from seqlab.printed_command import printed_command
from seqlab.serving.access import AccessGuard, AccessPolicy
from seqlab.serving.engine import CompletionEngine
from seqlab.serving.events import EventLog
from seqlab.serving.limits import BodyLimit, RateLimit, error
from seqlab.serving.routes import MAX_BODY_BYTES, STATIC, router
from seqlab.serving.state import ServerConfig, ServerState

__all__ = ["ServerConfig", "create_app", "load_engine"]


def load_engine(config: ServerConfig) -> tuple[CompletionEngine, dict[str, Any]]:
    """Load the run and choose the threshold: --min-confidence, else calibration.json, else 0."""
    from seqlab.evaluation.calibration import load_calibration
    from seqlab.generation.gate import DEFAULT_RULE, FIRST_WORD
    from seqlab.generation.phrases import blend_from_file
    from seqlab.runs.load import load_run

    model, tok, _ = load_run(config.run_dir, "cpu")
    phrases = None
    if config.phrases is not None:  # the person's phrase cache, blended as `complete --phrases` blends it
        model, phrases = blend_from_file(model, tok, config.phrases, config.phrase_weight)
    source = "--min-confidence"
    threshold, rule = config.min_confidence, FIRST_WORD  # --min-confidence is a first word's probability
    if threshold is None:
        calibration = load_calibration(config.run_dir)
        if calibration is not None:  # its rule (a file written before rules existed gated the first word)
            threshold, source = float(calibration["threshold"]), "calibration.json"
            rule = calibration.get("rule", FIRST_WORD)
        else:  # no threshold, but never lone punctuation (seqlab.generation.gate)
            threshold, rule = 0.0, DEFAULT_RULE
            source = f"none (run `{printed_command('calibrate', config.run_dir)}` to choose one for a target coverage)"
    engine = CompletionEngine(model, tok, threshold=threshold, max_sessions=config.max_sessions,
                              max_session_bytes=config.max_session_bytes, rule=rule)
    if config.memory is not None:  # the person's prepared mail (the personal store's joins under --learn)
        from seqlab.serving.remembered import build_memory, data_emails

        engine.memory_emails = data_emails(config.memory, tok)
        engine.memory = build_memory(engine.memory_emails, None)
    info = {**engine.describe(), "threshold_source": source, "run_dir": str(config.run_dir), "phrases": phrases}
    return engine, info


class ServedModel:
    """Which weights the engine serves under --learn: the run's (`general`) or the newest learned copy, as the
    last fit on the person's sent mail chose (`recalibrate.py`). Each method is a job for the model thread,
    so the choice and the copies change only there, between two requests (`CompletionEngine.replace_model`)."""

    def __init__(self, engine: CompletionEngine, general: nn.Module, learned: nn.Module | None,
                 unfitted_learned: bool = True) -> None:
        self.engine, self.general, self.learned = engine, general, learned
        # which is served before a fit and after `forget` (the recalibrator's UNFITTED_MODEL where fits run)
        self.unfitted = unfitted_learned
        self.use_learned = unfitted_learned  # until a fit says otherwise
        if learned is not None and unfitted_learned:
            engine.replace_model(learned)

    def learned_copy(self, model: nn.Module) -> None:
        """The learner published a copy: served at once unless the general model was chosen."""
        self.learned = model
        if self.use_learned:
            self.engine.replace_model(model)

    def choose(self, use_learned: bool) -> None:
        """Serve the learned copy (when there is one) or the run's model, as a fit chose."""
        if use_learned != self.use_learned:
            self.use_learned = use_learned
            self.engine.replace_model(self.learned if use_learned and self.learned is not None else self.general)

    def drop_learned(self) -> None:
        """What was learned is gone (`forget`): the run's model again, and the unfitted choice."""
        self.learned, self.use_learned = None, self.unfitted
        self.engine.replace_model(self.general)


def start_learning(state: ServerState, engine: CompletionEngine, info: dict[str, Any]) -> None:
    """`--learn`: serve the weights learned before (if they grew from this run's), remember the stored emails,
    and start the learner.

    Runs on the model thread once the engine is loaded, with the run's learning lock held. A learned copy is
    swapped in by a job on that same thread, so it replaces the served model between two requests
    (`ServedModel`); if the personal folder is deleted under the learner, the model loaded at start is
    swapped back in the same way."""
    from seqlab.generation.phrases import PhraseBlend, unblended
    from seqlab.serving.learner import Learner, load_learned, weights_digest
    from seqlab.serving.personal import PersonalStore
    from seqlab.serving.recalibrate import LEARNED, UNFITTED_MODEL
    from seqlab.serving.remembered import build_memory, sent_label

    general = engine.model
    base_model = unblended(general)
    base = weights_digest(base_model)

    def wrap(model: nn.Module) -> nn.Module:  # the phrase cache, if any, stays blended into learned weights
        return PhraseBlend(model, general.phrases) if isinstance(general, PhraseBlend) else model

    settings = state.config.learn_settings
    state.personal = PersonalStore(state.config.run_dir, settings.max_emails, settings.max_store_bytes)
    learned = copy.deepcopy(base_model)
    record = load_learned(learned, state.personal.folder, base)
    refits = state.config.min_confidence is None and engine.rule in VALUE_RULES  # else the person's own setting
    served = ServedModel(engine, general, wrap(learned) if record is not None else None,
                         UNFITTED_MODEL == LEARNED if refits else True)
    if record is not None:
        base_model = learned

    # the memory holds the store's emails too, and each new one the moment it is stored
    for e in state.personal.emails():
        engine.memory.add_body(e.body, sent_label(e))
    state.personal.listeners.append(lambda e: engine.memory.add_body(e.body, sent_label(e)))

    # the run's, before any fitted on sent mail
    rule, threshold, weights = engine.rule, engine.threshold, dict(engine.weights)

    def trained_again() -> None:  # the folder was deleted (`forget`): its emails leave the memory too, and
        state.worker.submit(served.drop_learned)  # the setting fitted on them
        state.worker.submit(setattr, engine, "memory", build_memory(engine.memory_emails, None))
        state.worker.submit(setattr, engine, "rule", rule)
        state.worker.submit(setattr, engine, "threshold", threshold)
        state.worker.submit(setattr, engine, "weights", weights)

    state.learner = Learner(base_model, engine.tokenizer, state.personal, state.idle,
                            lambda model: state.worker.submit(served.learned_copy, wrap(model)), settings,
                            base=base, record=record, on_forgotten=trained_again)
    if refits:
        weights = refit_on_sent_mail(state, engine, info, served, wrap)
    state.learner.start()
    if state.config.sent is not None:
        from seqlab.serving.sent_folder import SentFolder

        state.sent_folder = SentFolder(state.config.sent, state.personal, state.learner.notify,
                                       state.config.sent_every_s, settings.max_body_bytes, engine.reads_context)
        state.sent_folder.start()


def refit_on_sent_mail(state: ServerState, engine: CompletionEngine, info: dict[str, Any], served: ServedModel,
                       wrap: Callable[[nn.Module], nn.Module]) -> dict[str, float]:
    """Serve the threshold, memory weight and model fitted on the person's sent mail before (else the
    unfitted setting: the run's threshold, `UNFITTED_WEIGHTS` and `UNFITTED_MODEL`), and let the learner type
    each new email held out and refit them while idle as the mail grows (`recalibrate.py`); /health tells
    the setting. Returns the unfitted weights, which `forget` restores."""
    from seqlab.serving.recalibrate import GENERAL, LEARNED, UNFITTED_WEIGHTS, Recalibrator

    run_source = info.get("threshold_source")

    def apply(setting: dict[str, Any]) -> None:  # on the model thread: between two requests
        engine.rule, engine.threshold = str(setting["rule"]), float(setting["threshold"])
        engine.weights.update(setting["weights"])
        served.choose(setting.get("model", LEARNED) != GENERAL)
        source = (f"fitted on {setting['emails']} of your sent emails (personal/served.json)"
                  if setting.get("fitted", True) else
                  f"{run_source}; a fit on {setting['emails']} of your sent emails was not sure to save more")
        info.update(threshold=engine.threshold, rule=engine.rule, threshold_source=source, personal_setting=setting)
        info["memory"] = engine.describe()["memory"]

    recalibrator = Recalibrator(served.general, engine.tokenizer, state.personal, engine.memory_emails,
                                lambda setting: state.worker.submit(apply, setting),
                                unfitted=(engine.rule, engine.threshold))
    # loading runs on the model thread already; the model served unfitted was chosen with `served`
    engine.weights.update(UNFITTED_WEIGHTS)
    unfitted = dict(engine.weights)
    info["memory"] = engine.describe()["memory"]
    if recalibrator.last is not None:
        apply(recalibrator.last)
    assert state.learner is not None
    state.learner.idle_task = recalibrator
    state.learner.before_learning = lambda email, model: recalibrator.observe(email, wrap(model))
    return unfitted


def take_learning_lock(state: ServerState) -> None:
    """Hold the run's learning lock for as long as the app runs: the one `seqlab serve` took, else one of
    its own (released when the app stops). `LearningElsewhere` while another process learns on the run."""
    from seqlab.serving.personal import LearnerLock

    if state.config.learn_lock is None or not state.config.learn_lock.held:
        state.learn_lock = LearnerLock(state.config.run_dir).acquire()


def _start_loading(state: ServerState) -> None:
    """Load on the worker thread, so /health answers 503 meanwhile and the model is built where it runs."""
    def load() -> None:
        try:
            if state.config.learn:
                take_learning_lock(state)  # first: a second learner on the run is refused before any loading
            engine, info = load_engine(state.config)
            if state.config.learn:
                start_learning(state, engine, info)
                info["memory"] = engine.describe()["memory"]  # with the stored emails
            state.engine, state.info = engine, info  # ready only now: /health says ok with the learner running
        except Exception as exc:  # noqa: BLE001 (reported by /health; the server stays up to say so)
            state.failed = f"{type(exc).__name__}: {exc}"
            return
        if state.config.on_ready is not None:
            state.config.on_ready(state.info)

    state.worker.submit(load)


async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    return error(exc.status_code, str(exc.detail))


async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
    """422 naming the first field at fault (FastAPI's default lists every pydantic error)."""
    first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    name = ".".join(loc) or None
    return error(422, f"{name or 'the body'}: {first.get('msg', 'invalid value')}", name)


def create_app(config: ServerConfig) -> FastAPI:
    """The FastAPI app for one run; the run starts loading when the app starts."""
    def init_worker() -> None:
        torch.set_num_threads(config.threads)  # fixed: the model never competes with itself for cores

    pairings = config.pairings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="seqlab-model", initializer=init_worker)
        log_dir = config.log_dir or config.run_dir / "serve"
        settings = config.learn_settings
        # a completion's time is kept only with --learn, whose person chose to keep their writing; the
        # counters /v1/stats gives need none
        app.state.s = ServerState(config, worker, events=EventLog(log_dir, timestamps=config.learn),
                                  pairings=pairings, sent_rate=RateLimit(settings.sent_burst, settings.sent_every_s))
        _start_loading(app.state.s)
        try:
            yield
        finally:
            s = app.state.s
            if s.sent_folder is not None:
                s.sent_folder.stop()  # first: it stores no more mail for the learner to miss
            elif config.sent is not None:
                config.sent.close()  # opened by `seqlab serve` but never read (the run failed to load)
            if s.learner is not None:
                s.learner.stop()  # it checkpoints what it learned since its last swap, then writes nothing
            worker.shutdown(wait=False, cancel_futures=True)
            s.events.close()
            if s.personal is not None:
                s.personal.close()
            if s.learn_lock is not None:
                s.learn_lock.release()

    # no /docs or /redoc: those pages load their scripts from a CDN, and nothing here leaves the machine
    # strict_content_type said out loud: a JSON body only with a JSON Content-Type, even if a later FastAPI
    # changes its default (the gate already refuses other POST bodies with 415)
    app = FastAPI(title="seqlab autocomplete", version="1", lifespan=lifespan, docs_url=None, redoc_url=None,
                  strict_content_type=True)
    app.add_middleware(BodyLimit, max_bytes=MAX_BODY_BYTES)
    # added last, so it runs first: nothing, not even the body limit, sees a request the gate refuses
    policy = AccessPolicy(config.token, config.host, config.port, pairings, allow_remote=config.allow_remote,
                          login=config.login)
    app.state.policy = policy  # the pairing routes ask it which pasted secret a proof matches
    app.add_middleware(AccessGuard, policy=policy)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    app.add_exception_handler(StarletteHTTPException, _http_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _invalid)  # type: ignore[arg-type]
    app.include_router(router)
    return app
