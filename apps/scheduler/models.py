from django.db import models


class SchedulerNode(models.Model):
    """A live scheduler process, for sharing partitions fairly. Rows of dead ones just age out."""

    owner = models.CharField(max_length=200, primary_key=True)
    heartbeat_at = models.DateTimeField()
    started_at = models.DateTimeField()
    pinned_slice = models.CharField(max_length=50, blank=True)  # "i/n" for --shard i --shards n
    # Scheduling lag of the last tick: how late the most overdue occurrence was materialized.
    lag_ms = models.IntegerField(default=0)

    def __str__(self) -> str:
        return self.owner


class SchedulerLease(models.Model):
    """Ownership of one partition by one scheduler process until `expires_at`.

    `epoch` is a fencing token: it goes up on every change of owner, and a run is flipped to
    `queued` only inside a transaction that still sees the releasing process's (owner, epoch).
    A process that lost its lease while paused cannot enqueue for that partition when it wakes.
    """

    partition = models.SmallIntegerField(primary_key=True)
    owner = models.CharField(max_length=200, blank=True)
    epoch = models.BigIntegerField(default=0)
    expires_at = models.DateTimeField()
    acquired_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"partition {self.partition}: {self.owner or '-'} (epoch {self.epoch})"
