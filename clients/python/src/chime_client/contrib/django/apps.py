from django.apps import AppConfig


class ChimeClientConfig(AppConfig):
    name = "chime_client.contrib.django"
    label = "chime_client"
    verbose_name = "Chime webhook receipts"
    default_auto_field = "django.db.models.BigAutoField"
