from django.db import models


class WebhookReceipt(models.Model):
    """One ``webhook-id`` seen by this receiver: claimed while its handler runs, then done."""

    class State(models.TextChoices):
        PROCESSING = "processing"
        DONE = "done"

    webhook_id = models.CharField(max_length=255, primary_key=True)
    state = models.CharField(max_length=16, choices=State.choices)
    expires_at = models.DateTimeField(db_index=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        app_label = "chime_client"

    def __str__(self) -> str:
        return f"{self.webhook_id} ({self.state})"
