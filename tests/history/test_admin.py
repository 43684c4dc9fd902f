"""Staff set a tenant's retention in the admin (TenantLimits) and list every tenant's archives."""

from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from apps.history import services
from apps.jobs.models import JobRun
from apps.tenants.quotas import effective_limits


def _staff() -> Client:
    user = get_user_model().objects.create_superuser("staff", "staff@chime.test", "pw-Chime-2026!")
    client = Client()
    client.force_login(user)
    return client


def test_retention_is_set_in_the_tenant_admin_and_the_archives_are_listed(tenant, make_runs):
    staff = _staff()
    page = staff.get(f"/admin/tenants/tenant/{tenant.pk}/change/").content.decode()
    assert "run_retention_days" in page and "Default: 30 (CHIME_RUN_RETENTION_DAYS)" in page

    form = {
        "slug": tenant.slug,
        "name": tenant.name,
        "limits-TOTAL_FORMS": "1",
        "limits-INITIAL_FORMS": "0",
        "limits-MIN_NUM_FORMS": "0",
        "limits-MAX_NUM_FORMS": "1",
        "limits-0-tenant": str(tenant.pk),
        "limits-0-run_retention_days": "60",
        "memberships-TOTAL_FORMS": "0",
        "memberships-INITIAL_FORMS": "0",
        "memberships-MIN_NUM_FORMS": "0",
        "memberships-MAX_NUM_FORMS": "1000",
    }
    response = staff.post(f"/admin/tenants/tenant/{tenant.pk}/change/", form)
    assert response.status_code == 302, response.content.decode()[:2000]
    assert effective_limits(tenant.pk).run_retention_days == 60

    kept = make_runs(days_old=40)
    gone = make_runs(days_old=70)
    services.prune_tenant(tenant=tenant, now=timezone.now())
    assert list(JobRun.objects.values_list("id", flat=True)) == [kept[0].id]
    listing = staff.get("/admin/history/runarchive/").content.decode()
    assert tenant.slug in listing and "1 run archive" in listing
    assert gone[0].id not in JobRun.objects.values_list("id", flat=True)


def test_a_retention_of_zero_days_is_refused_in_the_admin(tenant):
    staff = _staff()
    form = {
        "slug": tenant.slug,
        "name": tenant.name,
        "limits-TOTAL_FORMS": "1",
        "limits-INITIAL_FORMS": "0",
        "limits-MIN_NUM_FORMS": "0",
        "limits-MAX_NUM_FORMS": "1",
        "limits-0-tenant": str(tenant.pk),
        "limits-0-run_retention_days": "0",
        "memberships-TOTAL_FORMS": "0",
        "memberships-INITIAL_FORMS": "0",
        "memberships-MIN_NUM_FORMS": "0",
        "memberships-MAX_NUM_FORMS": "1000",
    }
    response = staff.post(f"/admin/tenants/tenant/{tenant.pk}/change/", form)
    assert response.status_code == 200 and "greater than or equal to 1" in response.content.decode()
    assert effective_limits(tenant.pk).run_retention_days == 30
