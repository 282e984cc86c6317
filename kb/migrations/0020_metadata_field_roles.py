"""The roles' permissions on MetadataField (kb/roles.py): index admins declare, change and
delete fields; content managers see them. Re-asserts every role's permissions, as 0006 did."""

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
    dependencies = [
        ("kb", "0019_build_text_path"),
    ]

    operations = [migrations.RunPython(assign, migrations.RunPython.noop)]
