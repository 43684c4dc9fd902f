"""`manage.py create_database`: create the configured PostgreSQL database if it is missing.

`./chime run` calls it before `migrate`, so the README's PostgreSQL command works on a fresh server.
"""

from django.core.management.base import BaseCommand, CommandError

from apps.tenants.bootstrap import DatabaseSetupError, database_ensure


class Command(BaseCommand):
    help = "Create the PostgreSQL database named by DATABASE_URL when it does not exist (nothing for SQLite)."
    requires_system_checks = []  # the checks may query the very database that is missing

    def add_arguments(self, parser):
        parser.add_argument("--database", default="default", help="settings.DATABASES alias")

    def handle(self, *args, database, **options):
        try:
            status = database_ensure(database)
        except DatabaseSetupError as error:
            raise CommandError(str(error)) from None
        if status is None:
            return
        if status.created:
            self.stdout.write(f"Created the PostgreSQL database {status.name!r}.")
        elif options["verbosity"] > 1:
            self.stdout.write(f"The PostgreSQL database {status.name!r} exists.")
