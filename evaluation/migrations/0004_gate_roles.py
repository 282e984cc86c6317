"""The roles' permissions on quality gates (kb/roles.py): content managers see a knowledge
base's gate; index admins set it and may swap in a version it refuses, giving a reason.
Re-asserts every role's permissions, as 0002 did."""

from django.db import migrations


def assign(apps, schema_editor):
    from django.contrib.auth.management import create_permissions

    from kb.roles import ensure_roles

    # Permissions are normally created after all migrations; the groups need them now.
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    ensure_roles(
        apps.get_model("auth", "Group"), apps.get_model("auth", "Permission"), skip_missing=True
    )


class Migration(migrations.Migration):
    dependencies = [("evaluation", "0003_quality_gate")]

    operations = [migrations.RunPython(assign, migrations.RunPython.noop)]
