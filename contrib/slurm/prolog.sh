#!/bin/sh
# Slurm Prolog: record the job's GPUs in gpuallocd's ledger (hook.sh says how; always exits 0).
exec "$(dirname "$(readlink -f "$0")")/hook.sh" prolog
