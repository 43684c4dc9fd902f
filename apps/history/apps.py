from django.apps import AppConfig


class HistoryConfig(AppConfig):
    name = "apps.history"
    label = "history"
    default_auto_field = "django.db.models.BigAutoField"
