from django.contrib import admin
from django.contrib.staticfiles import finders
from django.http import FileResponse, Http404
from django.urls import include, path
from django.views.decorators.cache import cache_control


@cache_control(public=True, max_age=86400)
def favicon(request):
    """Browsers ask for /favicon.ico on pages that link no icon (the admin, the API's JSON); pages of the
    dashboard link static/favicon.svg. Read from the static source, so it needs no collectstatic."""
    found = finders.find("favicon.ico")
    if not found:
        raise Http404("favicon.ico")
    return FileResponse(open(found, "rb"), content_type="image/x-icon")  # FileResponse closes the file


urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include("apps.api.urls")),
    path("favicon.ico", favicon),
    path("", include("apps.dashboard.urls")),
]
