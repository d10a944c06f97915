"""The test app's routes, plus the broken endpoints of the proof kit's tests."""

from django.urls import path

from tests.testapp.urls import urlpatterns as testapp_urls

from . import broken, sound

urlpatterns = [
    *testapp_urls,
    path("sound/widgets/<int:pk>/ship/", sound.ShipWidgetView.as_view()),
    path("sound/form-widget/", sound.form_widget),
    path("sound/stamped-widget/", sound.StampedWidgetView.as_view()),
    path("broken/ships-by-task-at-once/", broken.ShipsByTaskView.as_view()),
    path("broken/charges-under-a-new-key/", broken.ChargesUnderANewKeyView.as_view()),
    path("sound/charges-and-reserves/", sound.ChargesAndReservesView.as_view()),
    path("broken/no-refund/", broken.NoRefundView.as_view()),
    path("broken/unkeyed-refund/", broken.UnkeyedRefundView.as_view()),
    path("broken/ledger-release/", broken.LedgerReleaseView.as_view()),
    path("broken/swapped-undos/", broken.SwappedUndosView.as_view()),
    path("broken/raising-undo/", broken.RaisingUndoView.as_view()),
    path("broken/widgets/<int:pk>/ship/", broken.ShipsSwallowingFailuresView.as_view()),
    path("broken/unguarded/", broken.UnguardedView.as_view()),
    path("broken/check-then-act/", broken.CheckThenActView.as_view()),
    path("broken/five-hundred/", broken.FiveHundredView.as_view()),
    path("broken/bad-request/", broken.ReturnedBadRequestView.as_view()),
    path("broken/excludes-name/", broken.ExcludesTheNameView.as_view()),
    path("broken/underived-charge/", broken.UnderivedChargeView.as_view()),
    path("broken/client-key-charge/", broken.ClientKeyChargeView.as_view()),
    path("broken/top-up/", broken.TopUpExcludingAmountView.as_view()),
    path("broken/top-up-charge/", broken.TopUpChargeView.as_view()),
    path("broken/swallows-everything/", broken.SwallowsEverythingView.as_view()),
    path("broken/swallows-notify/", broken.SwallowsNotifyFailureView.as_view()),
    path("broken/mails/", broken.MailsBeforeCompletingView.as_view()),
    path("broken/charges-on-commit/", broken.ChargesOnCommitView.as_view()),
    path(
        "broken/charges-on-commit-then-notes/",
        broken.ChargesOnCommitThenNotesItView.as_view(),
    ),
    path("broken/mails-outside-steps/", broken.MailsOutsideStepsView.as_view()),
    path("broken/reserves-outside-steps/", broken.ReservesOutsideStepsView.as_view()),
    path("broken/ships-by-task/", broken.ShipsByTaskOnCommitView.as_view()),
    path(
        "broken/charges-under-its-own-key/",
        broken.ChargesUnderItsOwnKeyView.as_view(),
    ),
    path("broken/timed-step/", broken.ChargesUnderATimedStepView.as_view()),
    path(
        "broken/swallows-integrity-error/",
        broken.SwallowsIntegrityErrorView.as_view(),
    ),
]
