"""Create (or reuse) a demo tenant with an owner user, and print a fresh API key. For `./chime run`.

The key replaces the one the previous start printed (apps/tenants/bootstrap.py), so starting
Chime again and again leaves one demo key, not one per start.
"""

import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from apps.tenants.bootstrap import demo_api_key_replace
from apps.tenants.models import Membership, Role
from apps.tenants.selectors import tenant_by_slug
from apps.tenants.services import tenant_create


class Command(BaseCommand):
    help = "Create the demo tenant and user, replace the demo API key, and print how to use them."

    def add_arguments(self, parser):
        parser.add_argument("--url", default="http://127.0.0.1:8000")

    @transaction.atomic
    def handle(self, *args, url, **options):
        tenant = tenant_by_slug("demo") or tenant_create(slug="demo", name="Demo")
        User = get_user_model()
        user = User.objects.filter(username="demo").first()
        password_line = "password: (set on first run; change it with ./chime manage changepassword demo)"  # noqa: S105
        if user is None:
            password = secrets.token_urlsafe(12)
            user = User.objects.create_user(username="demo", email="demo@example.com", password=password)
            password_line = f"password: {password}"
        Membership.objects.get_or_create(user=user, tenant=tenant, defaults={"role": Role.OWNER})
        key = demo_api_key_replace(tenant=tenant).raw_key
        self.stdout.write(
            "\n".join(
                [
                    "",
                    "Chime is starting.",
                    f"  URL:      {url}/",
                    f"  API:      {url}/api/v1/jobs",
                    f"  tenant:   {tenant.slug}",
                    f"  user:     {user.username}",
                    f"  {password_line}",
                    f"  API key:  {key}   (shown once; every start replaces it with a new one)",
                    "",
                    "Try it:",
                    f"  curl -s -H 'Authorization: Bearer {key}' {url}/api/v1/jobs",
                    "",
                ]
            )
        )
