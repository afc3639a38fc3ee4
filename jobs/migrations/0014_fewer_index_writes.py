# Every enqueue, claim and completion writes each index of the job table. Three
# of them served little: owner_id's own index (jobs_job_owner_status begins with
# it), worker_id's over all rows (set only while a job runs) and owner_status
# over the many jobs nobody owns. docs/performance.md, eighth round.

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

# The foreign keys' own indexes, by the names Django gave them. Dropped by name
# rather than by AlterField, which would also drop and re-validate both foreign
# keys: a scan of the whole table under lock.
FOREIGN_KEY_INDEXES = {"owner_id": "jobs_job_owner_id_4c884775", "worker_id": "jobs_job_worker_id_499f63bf"}


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0013_asked_fingerprint'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='job',
                    name='owner',
                    field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='jobs', to=settings.AUTH_USER_MODEL),
                ),
                migrations.AlterField(
                    model_name='job',
                    name='worker',
                    field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='jobs', to='jobs.worker'),
                ),
            ],
            database_operations=[
                migrations.RunSQL(f'DROP INDEX IF EXISTS "{name}"',
                                  reverse_sql=f'CREATE INDEX "{name}" ON "jobs_job" ("{column}")')
                for column, name in FOREIGN_KEY_INDEXES.items()
            ],
        ),
        migrations.RemoveIndex(
            model_name='job',
            name='jobs_job_owner_status',
        ),
        migrations.AddIndex(
            model_name='job',
            index=models.Index(condition=models.Q(('owner__isnull', False)), fields=['owner', 'status'], name='jobs_job_owner_status'),
        ),
        migrations.AddIndex(
            model_name='job',
            index=models.Index(condition=models.Q(('worker__isnull', False)), fields=['worker'], name='jobs_job_worker'),
        ),
    ]
