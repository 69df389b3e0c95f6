#!/bin/sh
# The body of prolog.sh and epilog.sh: `hook.sh prolog|epilog`. Always exits 0: a failing
# prolog or epilog drains the node. Settings: /etc/default/gpuallocd-slurm
# (GPUALLOCD_SOCKET, GPUALLOCD_SLURM_TTL, GPUALLOCD_SLURM_TIMEOUT, GPUALLOCD_SLURM_PYTHON).
defaults=${GPUALLOCD_SLURM_DEFAULTS:-/etc/default/gpuallocd-slurm}
# shellcheck disable=SC1090
[ -r "$defaults" ] && . "$defaults"
export GPUALLOCD_SOCKET GPUALLOCD_SLURM_TTL GPUALLOCD_SLURM_TIMEOUT
limit=${GPUALLOCD_SLURM_TIMEOUT:-15}
# The program stops itself after $limit seconds; timeout(1) is the backstop if it hangs.
timeout -k 2 "$((${limit%.*} + 5))" "${GPUALLOCD_SLURM_PYTHON:-python3}" \
    "$(dirname "$(readlink -f "$0")")/gpuallocd_slurm.py" "$1"
exit 0
