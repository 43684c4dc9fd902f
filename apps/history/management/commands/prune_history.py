"""`manage.py prune_history [--tenant SLUG] [--dry-run]`: archive, then delete, what retention lets go.

Run daily by the platform's scheduler (docs/operations.md#run-history-retention). Safe to run
again or concurrently: a pass resumes where the last one stopped, and a tenant another pass is
pruning is skipped (and said so).
"""

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from apps.history import services
from apps.history.archive import ArchiveWriteError
from apps.tenants.selectors import tenant_by_slug


class Command(BaseCommand):
    help = "Archive then delete runs older than retention; purge expired idempotency keys and dead scheduler nodes."

    def add_arguments(self, parser):
        parser.add_argument("--tenant", metavar="SLUG", help="Only this tenant (and no idempotency/node purge).")
        parser.add_argument("--dry-run", action="store_true", help="Count what would go; change nothing.")

    def handle(self, *args, tenant=None, dry_run=False, **options):
        now = timezone.now()
        if tenant is not None:
            found = tenant_by_slug(tenant)
            if found is None:
                raise CommandError(f"No tenant {tenant!r}.")
            tenants = [found]
        else:
            from apps.tenants.models import Tenant

            tenants = list(Tenant.objects.order_by("slug"))
        verb = "would archive and delete" if dry_run else "archived and deleted"
        total = 0
        for each in tenants:
            try:
                result = services.prune_tenant(tenant=each, now=now, dry_run=dry_run)
            except ArchiveWriteError as error:
                raise CommandError(f"{each.slug}: {error}; nothing of this batch was deleted.") from error
            if result.skipped_busy:
                self.stdout.write(f"{each.slug}: skipped, another prune of this tenant is running")
                continue
            total += result.runs
            self.stdout.write(
                f"{each.slug}: {verb} {result.runs} runs ({result.attempts} attempts, "
                f"{result.dead_letters} dead letters)"
                + ("" if dry_run else f" in {result.archives} archive files, {result.bytes} bytes")
            )
        if tenant is None and not dry_run:
            keys = services.purge_idempotency_records(now=now)
            nodes = services.purge_stale_scheduler_nodes(now=now)
            operations = services.purge_finished_operations(now=now)
            self.stdout.write(
                f"purged {keys} expired idempotency records, {nodes} stale scheduler nodes "
                f"and {operations} finished operations"
            )
        self.stdout.write(self.style.SUCCESS(f"done: {total} runs {'to prune' if dry_run else 'pruned'}"))
