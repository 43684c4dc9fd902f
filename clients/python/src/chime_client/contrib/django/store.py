"""A dedupe store in the receiver's own database (the ``WebhookReceipt`` model)."""

from datetime import timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from chime_client.dedupe import BUSY, CLAIMED, DONE, ClaimState

from .models import WebhookReceipt


class DjangoStore:
    """Claims by inserting the id's row (the primary key makes two inserts exclusive); an expired
    claim is taken over with a compare-and-swap update. Delete old rows with
    ``WebhookReceipt.objects.filter(expires_at__lt=timezone.now()).delete()`` now and then."""

    def __init__(self, using: str = "default"):
        self.using = using

    def claim(self, webhook_id: str, lease_seconds: float) -> ClaimState:
        now = timezone.now()
        expires = now + timedelta(seconds=lease_seconds)
        rows = WebhookReceipt.objects.using(self.using)
        try:
            with transaction.atomic(using=self.using):
                rows.create(webhook_id=webhook_id, state=WebhookReceipt.State.PROCESSING, expires_at=expires)
            return CLAIMED
        except IntegrityError:
            pass
        taken = rows.filter(webhook_id=webhook_id, expires_at__lte=now).update(
            state=WebhookReceipt.State.PROCESSING, expires_at=expires
        )
        if taken == 1:
            return CLAIMED
        state = rows.filter(webhook_id=webhook_id).values_list("state", flat=True).first()
        if state is None:  # deleted meanwhile: one more try
            return self.claim(webhook_id, lease_seconds)
        return DONE if state == WebhookReceipt.State.DONE else BUSY

    def complete(self, webhook_id: str, keep_seconds: float) -> None:
        expires = timezone.now() + timedelta(seconds=keep_seconds)
        WebhookReceipt.objects.using(self.using).update_or_create(
            webhook_id=webhook_id, defaults={"state": WebhookReceipt.State.DONE, "expires_at": expires}
        )

    def release(self, webhook_id: str) -> None:
        WebhookReceipt.objects.using(self.using).filter(
            webhook_id=webhook_id, state=WebhookReceipt.State.PROCESSING
        ).delete()
