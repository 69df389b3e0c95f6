"""What a start checks and takes before it serves, in the order it does it.

    preflight.py    every refusal that needs no state, before anything is written
    needs.py        what the enabled features need from the host
    integrity.py    the state and socket directories checked before they are trusted
    statelock.py    one daemon per state directory
    activation.py   the listening socket systemd passes (socket activation, LISTEN_FDS)

Imports `config/`.
"""
