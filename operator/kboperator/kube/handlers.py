"""kopf handlers for KnowledgeSource: each one hands the object to one reconcile function.

- `configure` (startup): kopf settings, and the shared OperatorContext in memo;
- `wake` (watch events that change the spec or the sync request): wakes the source's timer;
- `sync` (timer): the per-source reconcile loop, one turn per call, one call at a time per object;
- `cleanup` (deletion, behind the finalizer): the deletion policy, retried until it succeeds.

memo may carry `settings` (the OperatorSettings __main__ read) and, for tests, `search_transport`: an
httpx transport to the search service.
"""

from __future__ import annotations

from typing import Any

import kopf

from kboperator.crd import FINALIZER, GROUP, PLURAL, VERSION
from kboperator.kube import reconcile
from kboperator.kube.context import OperatorContext
from kboperator.kube.reconcile import source_state
from kboperator.kube.secrets import SecretReader
from kboperator.settings import OperatorSettings

#: Pause between two turns of a source's loop. Not how often a source is looked at: a turn that
#: has nothing to do waits inside itself (until its next time, a spec change, or stop; see
#: reconcile.run_loop_turn), so this only spaces the turns that wrote a status change.
TURN_PAUSE_SECONDS = 0.5


@kopf.on.startup(id="configure")
async def configure(settings: kopf.OperatorSettings, memo: Any, logger: kopf.Logger, **_: Any) -> None:
    # Read from the environment once per process: by `python -m kboperator` (__main__), or here when
    # another runner (tests, `kopf run`) started kopf without it.
    config = memo.get("settings") or OperatorSettings()
    memo["settings"] = config
    # One replica: standalone, no peering objects needed. More: kopf peering, the highest priority
    # live replica works and the others pause until its record expires (peering_lifetime_seconds).
    settings.peering.standalone = not config.peering_name
    if config.peering_name:
        settings.peering.name = config.peering_name
        settings.peering.mandatory = True
        settings.peering.priority = config.priority
        settings.peering.lifetime = config.peering_lifetime_seconds
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.StatusProgressStorage(field="status.kopf.progress")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
    # A stopped timer (object deleted) is re-checked this often until its running sync ends.
    settings.background.cancellation_polling = 2
    # Namespaces are exact names and the CRD is installed first: no need to watch Namespaces
    # or CRDs, so the operator needs no cluster-scoped permissions in namespaced mode.
    settings.scanning.disabled = True
    context = OperatorContext(config, secrets=SecretReader.from_environment(), transport=memo.get("search_transport"))
    context.metrics.serve(config.metrics_port)
    if context.webhooks is not None:
        await context.webhooks.start(config.webhook_port)
    memo["context"] = context
    logger.info(
        "kb-operator: search service %s (also allowed: %s), %d sync slots, local repositories %s",
        config.search_url,
        ", ".join(config.allowed_search_urls) or "none",
        config.max_concurrent_syncs,
        f"allowed under {config.local_repositories_root}" if config.allow_local_repositories else "refused",
    )


@kopf.on.cleanup(id="shutdown")
async def shutdown(memo: kopf.Memo, **_: Any) -> None:
    context = memo.get("context")
    if context is not None:
        await context.close()


def _noticeable(body: kopf.Body, memo: kopf.Memo, **_: Any) -> bool:
    return reconcile.noticeable(source_state(memo), body)


# Filtered, so that the many status-only events neither wake anything nor log a line each.
@kopf.on.event(GROUP, VERSION, PLURAL, id="wake", when=_noticeable)
async def wake(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    reconcile.notice(source_state(memo), body)


# The source's loop: kopf runs the turns (a timer, not a daemon: kopf applies a handler's patch
# only when the call returns, and every status change must reach the API at once).
# kopf passes `stopped` to timers too, but its TimerFn protocol does not list it.
@kopf.timer(GROUP, VERSION, PLURAL, id="sync", interval=TURN_PAUSE_SECONDS)  # type: ignore[arg-type]
async def source_loop(body: kopf.Body, patch: kopf.Patch, memo: Any, stopped: kopf.DaemonStopped, **_: Any) -> None:
    await reconcile.run_loop_turn(memo["context"], source_state(memo), body, patch, stopped)


@kopf.on.delete(GROUP, VERSION, PLURAL, id="cleanup")
async def cleanup(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, retry: int, **_: Any) -> None:
    await reconcile.cleanup(memo["context"], source_state(memo), body, patch, retry)
