from django.core.management.base import BaseCommand, CommandError

from apps.tenants.selectors import tenant_by_slug
from apps.tenants.services import api_key_create


class Command(BaseCommand):
    help = "Create an API key for a tenant and print the raw key, alone, on stdout (shown only once)."

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("--name", default="")

    def handle(self, *args, slug, name, **options):
        tenant = tenant_by_slug(slug)
        if tenant is None:
            raise CommandError(f"No tenant {slug!r}. Create it with: manage.py create_tenant {slug}")
        created = api_key_create(tenant=tenant, name=name)
        self.stdout.write(created.raw_key)
