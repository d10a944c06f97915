"""One test per system check id."""

import base64
from datetime import timedelta

import pytest

from tests.webhooks import signing
from webhooks.checks import check_settings

GOOD = {"VERIFIER": "github", "SECRETS": [signing.GITHUB_SECRET]}
STRIPE = {"VERIFIER": "stripe", "SECRETS": [signing.STRIPE_SECRET]}
DAY = timedelta(days=1)


def ids(settings, sources=None, **extra):
    settings.WEBHOOKS = {"SOURCES": sources, **extra} if sources is not None else extra
    return [error.id for error in check_settings()]


def test_the_test_sources_pass():
    assert check_settings() == []


def test_e001_unknown_setting(settings):
    assert ids(settings, NOPE=1) == ["webhooks.E001"]


def test_e002_sources_not_a_dict(settings):
    assert ids(settings, ["github"]) == ["webhooks.E002"]


@pytest.mark.parametrize("name", ["Has Space", "", "a/b", 7])
def test_e003_bad_source_name(settings, name):
    assert ids(settings, {name: GOOD}) == ["webhooks.E003"]


def test_e003_source_settings_not_a_dict(settings):
    assert ids(settings, {"github": "github"}) == ["webhooks.E003"]


def test_e004_unknown_source_key(settings):
    assert ids(settings, {"github": {**GOOD, "DEBUG": True}}) == ["webhooks.E004"]


@pytest.mark.parametrize("verifier", [None, "nope", "webhooks.sources.Source", "os"])
def test_e005_unknown_verifier(settings, verifier):
    assert ids(settings, {"x": {**GOOD, "VERIFIER": verifier}}) == ["webhooks.E005"]


@pytest.mark.parametrize(
    "secrets", [[], (), "s", "whsec_abc", b"key", [""], [" "], [None], None, ["a", 1]]
)
def test_e006_no_secrets(settings, secrets):
    assert ids(settings, {"x": {**GOOD, "SECRETS": secrets}}) == ["webhooks.E006"]


def test_e006_when_secrets_are_left_out(settings):
    assert ids(settings, {"x": {"VERIFIER": "github"}}) == ["webhooks.E006"]


@pytest.mark.parametrize("tolerance", [0, -1, "300", True])
def test_e007_bad_tolerance(settings, tolerance):
    config = {**GOOD, "TOLERANCE": tolerance}
    assert ids(settings, {"x": config}) == ["webhooks.E007"]


@pytest.mark.parametrize("size", [0, "1MB", 1.5, None])
def test_e008_bad_body_size(settings, size):
    config = {**GOOD, "MAX_BODY_SIZE": size}
    assert ids(settings, {"x": config}) == ["webhooks.E008"]


@pytest.mark.parametrize("headers", ["User-Agent", [1]])
def test_e009_headers_not_a_list_of_names(settings, headers):
    assert ids(settings, {"x": {**GOOD, "HEADERS": headers}}) == ["webhooks.E009"]


@pytest.mark.parametrize("header", ["Cookie", "authorization"])
def test_e010_credential_headers_are_never_stored(settings, header):
    assert ids(settings, {"x": {**GOOD, "HEADERS": [header]}}) == ["webhooks.E010"]


@pytest.mark.parametrize(
    "config",
    [
        {"VERIFIER": "standard", "SECRETS": ["whsec_not-base64"]},
        {"VERIFIER": "standard", "SECRETS": [signing.STRIPE_SECRET]},
        {"VERIFIER": "hmac", "SECRETS": ["s"], "OPTIONS": {"ENCODING": "b32"}},
        {"VERIFIER": "hmac", "SECRETS": ["s"], "OPTIONS": {"NOPE": 1}},
        {"VERIFIER": "hmac", "SECRETS": ["s"], "OPTIONS": {"ID_HEADER": ""}},
        {"VERIFIER": "hmac", "SECRETS": ["s"], "OPTIONS": {"TIMESTAMP_HEADER": True}},
        {"VERIFIER": "hmac", "SECRETS": ["s"], "OPTIONS": {"TIMESTAMP_HEADER": 300}},
        {"VERIFIER": "github", "SECRETS": ["s"], "OPTIONS": []},
        # Not names at all: the report of unknown ones must not crash on them.
        {"VERIFIER": "hmac", "SECRETS": ["s"], "OPTIONS": {1: "X-Id"}},
        {"VERIFIER": "github", "SECRETS": ["s"], "OPTIONS": {None: 1, "A": 2}},
    ],
)
def test_e011_verifier_rejects_its_settings(settings, config):
    assert ids(settings, {"x": config}) == ["webhooks.E011"]


def test_e011_a_verifier_that_refuses_its_options_when_made(settings):
    # Its ValueError crashed the check: a traceback instead of the source.
    config = {
        "VERIFIER": "tests.webhooks.test_views.RegionalVerifier",
        "SECRETS": [signing.HMAC_SECRET],
    }
    settings.WEBHOOKS = {"SOURCES": {"x": config}}

    [error] = check_settings()
    assert error.id == "webhooks.E011"
    assert "['x']" in error.msg
    assert "'eu' or 'us'" in error.hint


def test_messages_are_short(settings):
    settings.WEBHOOKS = {"SOURCES": {"x": {"VERIFIER": "nope", "TOLERANCE": 0}}}
    assert all(len(error.msg) < 80 for error in check_settings())


@pytest.mark.parametrize("retention", [0, "30d"])
def test_e012_bad_retention(settings, retention):
    assert ids(settings, {"x": GOOD}, RETENTION=retention) == ["webhooks.E012"]


@pytest.mark.parametrize("config", [GOOD, STRIPE])
def test_e018_retention_shorter_than_the_providers_retries(settings, config):
    source = {**config, "REPLAY_HORIZON": DAY}
    assert ids(settings, {"x": source}, RETENTION=3 * DAY - timedelta(seconds=1)) == [
        "webhooks.E018"
    ]
    assert ids(settings, {"x": source}, RETENTION=3 * DAY) == []
    # Nothing to resend without a source.
    assert ids(settings, {}, RETENTION=3600) == []


def test_e018_standard_webhooks_retention_outlasts_the_specs_retry_schedule(
    settings,
):
    # The spec's recommended schedule retries for 75 h 35 min 5 s: a receipt
    # purged after three days lets its last retry run the handlers again.
    source = {"VERIFIER": "standard", "SECRETS": [signing.STANDARD_SECRET]}
    schedule = timedelta(hours=75, minutes=35, seconds=5)
    assert ids(settings, {"x": source}, RETENTION=3 * DAY) == ["webhooks.E018"]
    assert ids(settings, {"x": source}, RETENTION=schedule) == ["webhooks.E018"]
    assert ids(settings, {"x": source}, RETENTION=4 * DAY) == []


@pytest.mark.parametrize(
    "config",
    [
        STRIPE,
        {"VERIFIER": "standard", "SECRETS": [signing.STANDARD_SECRET]},
        {
            "VERIFIER": "hmac",
            "SECRETS": [signing.HMAC_SECRET],
            "OPTIONS": {"TIMESTAMP_HEADER": "X-Timestamp"},
        },
    ],
)
def test_e019_retention_within_twice_the_tolerance_of_a_signed_time(settings, config):
    retention = {"RETENTION": 4 * DAY}
    tolerance = (2 * DAY).total_seconds()
    assert ids(
        settings, {"x": {**config, "TOLERANCE": tolerance + 1}}, **retention
    ) == ["webhooks.E019"]
    # Equal to the "RETENTION <= TOLERANCE", refused too.
    assert ids(settings, {"x": {**config, "TOLERANCE": 4 * DAY}}, **retention) == [
        "webhooks.E019"
    ]
    assert ids(settings, {"x": {**config, "TOLERANCE": tolerance}}, **retention) == []


@pytest.mark.parametrize(
    "config", [GOOD, {"VERIFIER": "hmac", "SECRETS": [signing.HMAC_SECRET]}]
)
def test_e020_a_source_without_a_signed_time_states_its_replay_horizon(
    settings, config
):
    # The default REPLAY_HORIZON is the default RETENTION: lowering RETENTION
    # needs each such source to say it accepts the shorter horizon.
    assert ids(settings, {"x": config}, RETENTION=7 * DAY) == ["webhooks.E020"]
    stated = {**config, "REPLAY_HORIZON": 7 * DAY}
    assert ids(settings, {"x": stated}, RETENTION=7 * DAY) == []
    longer = {**config, "REPLAY_HORIZON": 7 * DAY + timedelta(seconds=1)}
    assert ids(settings, {"x": longer}, RETENTION=7 * DAY) == ["webhooks.E020"]
    # A signed time bounds replays instead: no statement needed.
    assert ids(settings, {"x": STRIPE}, RETENTION=7 * DAY) == []


@pytest.mark.parametrize("horizon", [0, "30d", None])
def test_e020_bad_replay_horizon(settings, horizon):
    config = {**GOOD, "REPLAY_HORIZON": horizon}
    assert ids(settings, {"x": config}) == ["webhooks.E020"]


def test_e006_says_why_a_bare_string_is_refused(settings):
    settings.WEBHOOKS = {"SOURCES": {"x": {**GOOD, "SECRETS": "whsec_abc"}}}
    [error] = check_settings()
    assert "single string" in error.msg
    assert "one character at a time" in error.hint


def test_e017_a_secret_shorter_than_16_bytes(settings):
    assert ids(settings, {"x": {**GOOD, "SECRETS": ["0123456789abcde"]}}) == [
        "webhooks.E017"
    ]
    assert ids(settings, {"x": {**GOOD, "SECRETS": ["x"]}}) == ["webhooks.E017"]
    assert ids(settings, {"x": {**GOOD, "SECRETS": ["0123456789abcdef"]}}) == []
    # Each secret counts, the one being rotated out too.
    rotating = {**GOOD, "SECRETS": ["0123456789abcdef", "short"]}
    assert ids(settings, {"x": rotating}) == ["webhooks.E017"]
    # Standard Webhooks keys count in decoded bytes.
    short = "whsec_" + base64.b64encode(b"short").decode()
    config = {"VERIFIER": "standard", "SECRETS": [short]}
    assert ids(settings, {"x": config}) == ["webhooks.E017"]


def test_e017_min_secret_bytes_is_the_override_for_shorter_provider_secrets(
    settings,
):
    config = {**GOOD, "SECRETS": ["0123456789ab"], "MIN_SECRET_BYTES": 12}
    assert ids(settings, {"x": config}) == []
    assert ids(settings, {"x": {**config, "MIN_SECRET_BYTES": 13}}) == ["webhooks.E017"]


@pytest.mark.parametrize("minimum", [0, -1, "16", 1.5, True])
def test_e017_bad_min_secret_bytes(settings, minimum):
    config = {**GOOD, "MIN_SECRET_BYTES": minimum}
    assert ids(settings, {"x": config}) == ["webhooks.E017"]


def test_retention_messages_are_short(settings):
    sources = {
        "github": {**GOOD, "REPLAY_HORIZON": 30 * DAY},
        "stripe": {**STRIPE, "TOLERANCE": 2 * DAY.total_seconds()},
    }
    settings.WEBHOOKS = {"SOURCES": sources, "RETENTION": DAY}
    messages = check_settings()
    assert {m.id for m in messages} == {
        "webhooks.E018",
        "webhooks.E019",
        "webhooks.E020",
    }
    assert all(len(m.msg) < 80 for m in messages)


def test_every_bad_source_and_value_is_reported_in_one_run(settings):
    sources = {
        "a": {"VERIFIER": "nope", "SECRETS": "s", "TOLERANCE": 0},
        "b": {"VERIFIER": "github", "SECRETS": [""]},
    }
    assert sorted(ids(settings, sources)) == [
        "webhooks.E005",
        "webhooks.E006",
        "webhooks.E006",
        "webhooks.E007",
    ]


@pytest.mark.parametrize(
    ("extra", "error_id"),
    [
        ({"ENQUEUE": "webhooks.tasks.nope"}, "webhooks.E013"),
        ({"MAX_RETRIES": -1}, "webhooks.E014"),
        ({"RETRY_BACKOFF_MAX": 0}, "webhooks.E014"),
        ({"STEPS_LEASE": 0.5}, "webhooks.E014"),
        ({"KICK_INTERVAL": 0}, "webhooks.E016"),
        ({"KICK_INTERVAL": "fast"}, "webhooks.E016"),
    ],
)
def test_app_settings(settings, extra, error_id):
    assert ids(settings, {}, **extra) == [error_id]


def test_a_list_instead_of_a_dict_is_reported_not_a_crash(settings):
    settings.WEBHOOKS = ["SOURCES"]
    assert [error.id for error in check_settings()] == ["webhooks.E001"]


def test_w003_the_default_enqueue_without_a_celery_broker(settings):
    from tests.celery import app
    from webhooks.checks import check_enqueue

    saved = app.conf.broker_url
    try:
        app.conf.broker_url = None
        settings.WEBHOOKS = {}
        assert [e.id for e in check_enqueue()] == ["webhooks.W003"]
        settings.WEBHOOKS = {"ENQUEUE": "webhooks.tasks.enqueue"}
        assert [e.id for e in check_enqueue()] == ["webhooks.W003"]
        settings.WEBHOOKS = {"ENQUEUE": "builtins.print"}
        assert check_enqueue() == []
    finally:
        app.conf.broker_url = saved
    settings.WEBHOOKS = {}
    assert check_enqueue() == []


@pytest.mark.parametrize("pasted", ["{}\n", "{}\r\n", " {}", "{}\t"])
def test_e006_a_secret_with_whitespace_around_it(settings, pasted):
    # Read from a file or an env var with its newline, the key never matches
    # a provider's signature: refused as a setting, never 401 on every delivery.
    secrets = [signing.GITHUB_SECRET, pasted.format(signing.GITHUB_SECRET)]
    settings.WEBHOOKS = {"SOURCES": {"x": {**GOOD, "SECRETS": secrets}}}
    [error] = check_settings()
    assert error.id == "webhooks.E006"
    assert "whitespace around it (SECRETS[1])" in error.msg
