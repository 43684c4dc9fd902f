from django.urls import path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.routers import SimpleRouter

from .views.archives import ArchiveViewSet
from .views.base import not_found
from .views.jobs import JobViewSet
from .views.keys import ApiKeyViewSet
from .views.operations import OperationViewSet
from .views.runs import RunViewSet
from .views.schedules import schedule_preview
from .views.signing import signing_secret, signing_secret_rotation
from .views.stats import stats

router = SimpleRouter(trailing_slash=False)
router.register("jobs", JobViewSet, basename="job")
router.register("runs", RunViewSet, basename="run")
router.register("api-keys", ApiKeyViewSet, basename="api-key")
router.register("operations", OperationViewSet, basename="operation")
router.register("archives", ArchiveViewSet, basename="archive")

app_name = "api"
urlpatterns = [
    path("signing-secret", signing_secret, name="signing-secret"),
    path("signing-secret/rotate", signing_secret_rotation, name="signing-secret-rotate"),
    path("schedules/preview", schedule_preview, name="schedule-preview"),
    path("stats", stats, name="stats"),
    # No trailing slash anywhere under /api/v1 (one rule); with one, not_found names the right path.
    path("schema", SpectacularAPIView.as_view(authentication_classes=[], permission_classes=[]), name="schema"),
    path(
        "docs",
        SpectacularSwaggerView.as_view(url_name="api:schema", authentication_classes=[], permission_classes=[]),
        name="docs",
    ),
    *router.urls,
    re_path(r"^.*$", not_found, name="not-found"),  # JSON 404s under /api/v1 too
]
