"""Administering commands: drain, reserve, check the box (docs/cli.md, "Administering").

admin.py          drain, undrain, admin-log, release
reserve.py        reserve, unreserve, reservations
doctor.py         doctor: one line per check of the box
doctor_checks.py  the checks themselves
ledger.py         ledger backup, ledger verify
hardware.py       topology, rescan
integrations.py   slurm-gres
"""
