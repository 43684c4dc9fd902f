from django.urls import path

from .views import archives, auth, health, jobs, keys, operations, overview, runs, tenancy

app_name = "dashboard"

urlpatterns = [
    path("", overview.overview, name="overview"),
    path("health/", health.health, name="health"),
    # accounts
    path("signup/", auth.signup, name="signup"),
    path("login/", auth.login_view, name="login"),
    path("logout/", auth.logout_view, name="logout"),
    path("password-reset/", auth.password_reset, name="password_reset"),
    path("password-reset/sent/", auth.password_reset_done, name="password_reset_done"),
    path("reset/<uidb64>/<token>/", auth.password_reset_confirm, name="password_reset_confirm"),
    path("reset/done/", auth.password_reset_complete, name="password_reset_complete"),
    path("tenant/", tenancy.switch_tenant, name="switch_tenant"),
    path("preferences/timezone/", tenancy.set_timezone, name="set_timezone"),
    # jobs
    path("jobs/", jobs.job_list, name="job_list"),
    path("jobs/new/", jobs.job_create, name="job_create"),
    path("jobs/preview/", jobs.schedule_preview, name="schedule_preview"),
    path("jobs/<uuid:job_id>/", jobs.job_detail, name="job_detail"),
    path("jobs/<uuid:job_id>/edit/", jobs.job_edit, name="job_edit"),
    path("jobs/<uuid:job_id>/pause/", jobs.job_pause, name="job_pause"),
    path("jobs/<uuid:job_id>/resume/", jobs.job_resume, name="job_resume"),
    path("jobs/<uuid:job_id>/trigger/", jobs.job_trigger, name="job_trigger"),
    path("jobs/<uuid:job_id>/delete/", jobs.job_delete, name="job_delete"),
    # runs
    path("runs/", runs.run_list, name="run_list"),
    path("runs/<uuid:run_id>/", runs.run_detail, name="run_detail"),
    path("runs/<uuid:run_id>/attempts/", runs.run_attempts, name="run_attempts"),
    path("runs/<uuid:run_id>/replay/", runs.run_replay, name="run_replay"),
    path("dead-letters/", runs.dead_letters, name="dead_letters"),
    path("dead-letters/replay/", runs.dead_letters_replay, name="dead_letters_replay"),
    path("dead-letters/replay-all/", operations.dead_letters_replay_all, name="dead_letters_replay_all"),
    # bulk operations
    path("operations/", operations.operation_list, name="operation_list"),
    path("operations/<uuid:operation_id>/", operations.operation_detail, name="operation_detail"),
    # run archives
    path("archives/", archives.archive_list, name="archive_list"),
    path("archives/<uuid:archive_id>/download/", archives.archive_download, name="archive_download"),
    # credentials
    path("keys/", keys.api_keys, name="api_keys"),
    path("keys/new/", keys.api_key_create, name="api_key_create"),
    path("keys/<uuid:key_id>/revoke/", keys.api_key_revoke, name="api_key_revoke"),
    path("signing-secret/", keys.signing_secret, name="signing_secret"),
    path("signing-secret/rotate/", keys.signing_secret_rotate, name="signing_secret_rotate"),
]
