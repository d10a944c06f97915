"""The fake outside services count what the fault tests assert on."""

from tests.fakes import fake_services
from tests.testapp import services


def test_keyed_services_make_one_effect_per_key_and_the_mailer_one_per_call(
    monkeypatch,
):
    with fake_services() as fakes:
        monkeypatch.setenv("FAKES_URL", fakes.url)
        first = services.charge("k1", 500)
        assert services.charge("k1", 500) == first
        services.charge("k2", 500)
        services.refund("r1", first["id"])
        services.refund("r1", first["id"])
        services.book_shipment("s1", 1)
        services.send_mail("a@example.com", "receipt")
        services.send_mail("a@example.com", "receipt")

        assert fakes.effects.counts() == {
            "charge": 2,
            "refund": 1,
            "shipment": 1,
            "mail": 2,
        }
        assert fakes.effects.calls["charge"] == 3
