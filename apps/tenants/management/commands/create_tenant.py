from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.core.validators import validate_slug

from apps.tenants.selectors import tenant_by_slug
from apps.tenants.services import tenant_create


class Command(BaseCommand):
    help = "Create a tenant (with its webhook signing secret)."

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("--name", default="")

    def handle(self, *args, slug, name, **options):
        try:
            validate_slug(slug)
        except ValidationError as error:
            raise CommandError(f"Invalid slug {slug!r}: use letters, numbers, hyphens or underscores.") from error
        if tenant_by_slug(slug):
            raise CommandError(f"Tenant {slug!r} already exists.")
        tenant = tenant_create(slug=slug, name=name)
        self.stdout.write(f"Created tenant {tenant.slug} ({tenant.id})")
