"""The hand-rolled design's one table: a webhook to send once at `due_at`."""

from django.db import models


class Webhook(models.Model):
    """pending -> queued (the scan sent its task) -> sent | failed (the task recorded the outcome)."""

    url = models.CharField(max_length=500)
    payload = models.JSONField(default=dict)
    due_at = models.DateTimeField()
    status = models.CharField(max_length=10, default="pending")
    attempts = models.PositiveSmallIntegerField(default=0)
    status_code = models.IntegerField(null=True)
    sent_at = models.DateTimeField(null=True)

    class Meta:
        app_label = "shop"
        indexes = [models.Index(fields=["status", "due_at"], name="shop_webhook_due_idx")]

    def __str__(self) -> str:
        return f"{self.url} at {self.due_at}"
