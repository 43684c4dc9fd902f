from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = []

    operations = [
        migrations.CreateModel(
            name="WebhookReceipt",
            fields=[
                ("webhook_id", models.CharField(max_length=255, primary_key=True, serialize=False)),
                (
                    "state",
                    models.CharField(choices=[("processing", "Processing"), ("done", "Done")], max_length=16),
                ),
                ("expires_at", models.DateTimeField(db_index=True)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
            ],
        ),
    ]
