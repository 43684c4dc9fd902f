"""Accounts for the dashboard: sign-up (a tenant and its owner) and a user's memberships."""

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Q
from django.utils.text import slugify

from .models import Membership, Role, Tenant
from .services import tenant_create

MANAGER_ROLES = (Role.OWNER, Role.ADMIN)


def email_taken(email: str) -> bool:
    User = get_user_model()
    return User.objects.filter(Q(username__iexact=email) | Q(email__iexact=email)).exists()


def unique_tenant_slug(name: str) -> str:
    """A free slug derived from the tenant's name: 'Acme Inc' -> 'acme-inc', then 'acme-inc-2', ..."""
    base = slugify(name)[:40].strip("-") or "tenant"
    taken = set(Tenant.objects.filter(slug__startswith=base).values_list("slug", flat=True))
    slug, n = base, 1
    while slug in taken:
        n += 1
        slug = f"{base}-{n}"
    return slug


@transaction.atomic
def account_signup(*, email: str, password: str, tenant_name: str) -> Membership:
    """A new user (username = email) who owns a new tenant (with its signing secret)."""
    email = email.strip().lower()
    user = get_user_model().objects.create_user(username=email, email=email, password=password)
    tenant = tenant_create(slug=unique_tenant_slug(tenant_name), name=tenant_name.strip())
    return Membership.objects.create(user=user, tenant=tenant, role=Role.OWNER)


def memberships_of(user) -> list[Membership]:
    """Every tenant the user belongs to, with the tenant loaded, by tenant name."""
    if not user.is_authenticated:
        return []
    return list(Membership.objects.filter(user=user).select_related("tenant").order_by("tenant__name", "tenant_id"))


def membership_of(user, tenant_id) -> Membership | None:
    """The user's membership in one tenant, or None: the one check every dashboard request makes."""
    if not user.is_authenticated or not tenant_id:
        return None
    return Membership.objects.filter(user=user, tenant_id=tenant_id).select_related("tenant").first()


def can_manage(membership: Membership | None) -> bool:
    """Owners and admins manage jobs, runs and keys; viewers only read."""
    return membership is not None and membership.role in MANAGER_ROLES
