"""The ledger's care in the daemon: opened whole, backed up, recovered when damaged.

    opening.py    the ledger opened at start: its files, integrity and version checked
    versions.py   its schema version: a newer one refused with the way back, an older one
                  backed up before its upgrade
    health.py     its integrity and its backups, as doctor shows them
    backups.py    backups on a timer, at a clean stop, and on an admin's request
    recovery.py   `gpuallocd --recover`: rebuild a damaged ledger, never double-book
    rebuild.py    the recovered ledger: salvaged rows, a backup, then the leases judged
    records.py    what the records say of the leases to judge (owner, held, units)
    machine.py    what the machine shows: processes on GPUs and their owners (the kernel's),
                  lease ids carried (believed only for the same user's recorded lease)
    restore.py    leases held without units: back under their own id, kept, ended or lost
    holds.py      GPUs in use no lease explains: their user's lease within the rules, or
                  held for the admins

Imports `config/` and `startup/`.
"""
