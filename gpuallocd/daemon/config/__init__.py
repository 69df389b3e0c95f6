"""The daemon's settings: declared once, read, checked, and turned into domain values.

    settings.py           every setting declared once (name, type, default, meaning)
    loading.py            defaults < config file < environment < options, read strictly
    limits_table.py       the `[limits]` table read strictly into a LimitsTable
    scheduling_checks.py  checks of the scheduling settings their types cannot say
    backup_checks.py      checks of the backup settings their types cannot say
    notify_checks.py      checks of the notification settings: site channels, events
    machine_checks.py     the config against the machine: unknown users and groups, slips
    wiring.py             the config turned into every domain value (at start and on reload)

Imports nothing of the daemon's other rooms.
"""
