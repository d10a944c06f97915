"""The intake view: size limit, verify, insert, enqueue; answer fast."""

import hashlib
import json

from django.contrib.auth.decorators import login_not_required
from django.core.exceptions import ImproperlyConfigured
from django.db import router, transaction
from django.http import HttpResponse
from django.views import View
from django.views.decorators.csrf import csrf_exempt

from idempotency.shared import clock, databases, tracing
from idempotency.shared.problems import from_exception

from . import bodies, signals, sources
from .conf import webhooks_settings
from .exceptions import (
    CHANGED_BODY,
    REPLAYED_BODY,
    ReceiptBusy,
    SourceMisconfigured,
    SourceOutOfService,
    UnknownSource,
    VerificationFailed,
    WebhookError,
)
from .models import WebhookReceipt, WebhookRejection

State = WebhookReceipt.State
# Inserts one delivery tries while the receipts it conflicts with keep
# disappearing (purged or deleted between the INSERT and the read).
INSERT_ATTEMPTS = 3


class WebhookView(View):
    """Receive one delivery for the source named in the URL.

    The flow is fixed here; providers differ only in their verifier. Nothing
    is stored before the signature checks out.
    """

    http_method_names = ["post"]

    @classmethod
    def as_view(cls, **initkwargs):
        # Exempt the view function once, as DRF's APIView does: a
        # method_decorator on dispatch would wrap it again on every request.
        # Providers never log in: LoginRequiredMiddleware must let them by.
        return login_not_required(csrf_exempt(super().as_view(**initkwargs)))

    def post(self, request, source):
        delivery = None
        try:
            config = _source(source)
            # Named after a configured source only: an unknown one in the URL
            # must not make a span name of its own.
            with tracing.webhook("receive", config.name):
                body = bodies.read(request, config.max_body_size)
                delivery = self.authenticate(config, body, request.headers)
                return self.accept(config, delivery, request, body)
        except WebhookError as refusal:
            # An unknown source's name is the client's: never repeated.
            known = not isinstance(refusal, UnknownSource)
            signals.rejected(source if known else "", refusal, delivery)
            return from_exception(refusal)

    def authenticate(self, config, body, headers):
        """The verified delivery; a refusal is counted, then raised."""
        try:
            return config.verifier.authenticate(body, headers)
        except VerificationFailed as exc:
            self.count(config, exc.reason)
            raise

    def accept(self, config, delivery, request, body):
        using = router.db_for_write(WebhookReceipt)
        # Refused before the receipt: answered 202, it would then roll back.
        databases.refuse_unusable(using, ImproperlyConfigured)
        receipts = WebhookReceipt.objects.db_manager(using)
        # An unsigned delivery id can be changed at will: then the body, which
        # is signed, identifies the delivery too.
        body_sha256 = (
            ""
            if config.verifier.signs_delivery_id
            else hashlib.sha256(body).hexdigest()
        )
        # No explicit transaction: the INSERT commits on its own (one round
        # trip), and on_commit then enqueues once the row is durable. Inside
        # an outer atomic block (ATOMIC_REQUESTS) both wait for its commit.
        for _attempt in range(INSERT_ATTEMPTS):
            pk = receipts.insert_received(
                source=config.name,
                delivery=delivery,
                headers=config.filter_headers(request.headers),
                body=body,
                body_sha256=body_sha256,
                now=clock.now(),
            )
            if pk is not None:
                # Heard before processing, which may run at once.
                signals.accepted(
                    config.name, delivery, reopened=False, using=receipts.db
                )
                self.enqueue(pk, receipts.db)
                return _answer(202, delivery, State.RECEIVED)
            existing = receipts.duplicate_of(
                config.name, delivery.delivery_id, body_sha256
            )
            if existing is not None:
                if self.changed(config, delivery, existing, body, receipts):
                    self.count(config, CHANGED_BODY)
                return self.duplicate(config, delivery, existing, receipts)
            # The receipt it conflicted with was purged or deleted since:
            # nothing keeps this delivery from being new now, so insert again.
        # Deleted under every attempt: the provider retries later.
        raise ReceiptBusy("A receipt for this delivery was being removed; retry.")

    def duplicate(self, config, delivery, existing, receipts):
        """Answer a delivery whose receipt (or body) is already stored."""
        if existing.delivery_id != delivery.delivery_id:
            # A stored body under a new delivery id: a captured delivery sent
            # again. Answered as the duplicate it is, counted for operators.
            self.count(config, REPLAYED_BODY)
        # A provider redelivering a failed event asks for another try.
        elif existing.state == State.FAILED and receipts.reopen_failed(existing.pk):
            signals.accepted(config.name, delivery, reopened=True, using=receipts.db)
            self.enqueue(existing.pk, receipts.db)
            return _answer(202, delivery, State.RECEIVED)
        signals.duplicate(config.name, delivery, existing)
        return _answer(200, delivery, existing.state, duplicate=True)

    def changed(self, config, delivery, existing, body, receipts):
        """Whether a signed delivery id whose resends all carry one body came
        back with another: the sender reused it for another event, which is
        lost. (Where ids are unsigned the id decides, and a resend may carry
        any stored body; Stripe renders each attempt anew.)"""
        verifier = config.verifier
        return (
            verifier.signs_delivery_id
            and verifier.resends_same_body
            and existing.delivery_id == delivery.delivery_id
            and not receipts.filter(pk=existing.pk, body=body).exists()
        )

    def count(self, config, reason):
        # A write: on the database for writes, as the receipt's (a plain
        # manager would send it where the router sends reads, a replica).
        rejections = WebhookRejection.objects.db_manager(
            router.db_for_write(WebhookRejection)
        )
        rejections.count_one(source=config.name, reason=reason, now=clock.now())

    def enqueue(self, pk, using):
        """Hand the receipt to processing once its row is committed."""
        enqueue = webhooks_settings.ENQUEUE
        # robust: the receipt is committed; a broker outage must not turn into
        # a 5xx (the provider would resend a duplicate we then ignore). The
        # receipt stays "received" and webhooks.enqueue_waiting picks it up.
        transaction.on_commit(lambda: enqueue(pk), using=using, robust=True)


def _source(name):
    """The source called ``name``; refuse one that is unknown or misconfigured."""
    try:
        config = sources.get(name)
    except SourceMisconfigured as exc:
        # Fail closed: a source whose secrets could accept a forgery takes
        # nothing. 5xx, so the provider retries once the settings are fixed.
        raise SourceOutOfService(
            "This source's settings are invalid; the server's error log says why."
        ) from exc
    if config is None:
        raise UnknownSource()
    return config


def _answer(status, delivery, state, duplicate=False):
    body = {"delivery_id": delivery.delivery_id, "state": state}
    if duplicate:
        body["duplicate"] = True
    return HttpResponse(
        json.dumps(body), status=status, content_type="application/json"
    )
