#!/bin/sh
# Slurm Epilog: free the job's lease in gpuallocd's ledger (hook.sh says how; always exits 0).
exec "$(dirname "$(readlink -f "$0")")/hook.sh" epilog
