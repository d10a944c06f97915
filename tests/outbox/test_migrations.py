from django.core.management import call_command


def test_models_and_migrations_agree(db):
    call_command("makemigrations", "outbox", "inbox", "--check", "--dry-run")
