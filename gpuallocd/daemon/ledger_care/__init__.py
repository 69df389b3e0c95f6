"""The ledger's care in the daemon: opened whole, backed up, recovered when damaged.

    opening.py    the ledger opened at start: its files and its integrity checked
    health.py     its integrity and its backups, as doctor shows them
    backups.py    backups on a timer, at a clean stop, and on an admin's request
    recovery.py   `gpuallocd --recover`: rebuild a damaged ledger, never double-book
    rebuild.py    the recovered ledger: salvaged rows, a backup, what the machine proves

Imports `config/` and `startup/`.
"""
