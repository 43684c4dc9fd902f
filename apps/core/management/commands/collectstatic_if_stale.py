"""`manage.py collectstatic_if_stale`: what the Procfile's web process runs before uvicorn, so a deploy
without a build step still serves its assets. The logic is in config/staticfiles.py."""

from django.core.management.base import BaseCommand

from config.staticfiles import collect_if_stale


class Command(BaseCommand):
    help = "Run collectstatic unless STATIC_ROOT already matches the static sources (a no-op then)."
    requires_system_checks = []  # as collectstatic: it only copies files, and runs on every web start

    def handle(self, *args, **options):
        self.stdout.write(collect_if_stale())
