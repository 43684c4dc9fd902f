from rest_framework import serializers

from apps.history.models import ArchiveKind, RunArchive

from ..fields import UTCDateTimeField


class ArchiveSerializer(serializers.ModelSerializer):
    id = serializers.CharField(read_only=True)
    kind = serializers.ChoiceField(
        choices=ArchiveKind.choices,
        help_text="prune: runs that left the run history (this file is their copy); export: a copy of a range",
    )
    day = serializers.DateField(help_text="The UTC day the runs were created on")
    part = serializers.IntegerField(help_text="Parts of one day are numbered from 1; a later pass adds parts")
    bytes = serializers.IntegerField(help_text="Size of the gzip file")
    sha256 = serializers.CharField(help_text="SHA-256 of the gzip file, hex")
    created_at = UTCDateTimeField()

    class Meta:
        model = RunArchive
        fields = ["id", "kind", "day", "part", "run_count", "attempt_count", "bytes", "sha256", "created_at"]
        read_only_fields = fields
