from django.core.management.base import BaseCommand

from apps.jobs.secrets import reencrypt_target_headers


class Command(BaseCommand):
    help = "Encrypt every job's target header values again with the first key of CHIME_FIELD_ENCRYPTION_KEYS."

    def handle(self, *args, **options):
        done, skipped = reencrypt_target_headers()
        self.stdout.write(f"{done} jobs re-encrypted, {skipped} skipped (a value no configured key opens).")
