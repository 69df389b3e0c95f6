#!/bin/bash
# A single-node Slurm cluster on fake GPUs, with gpuallocd's prolog and epilog: runs a real
# `srun --gres=gpu:2` job as an unprivileged user and checks the ledger while it runs and
# after. Needs root, slurmctld, slurmd, munged and srun (Debian: slurmctld slurmd
# slurm-client munge). Starts its own gpuallocd on a fake topology, slurmctld, slurmd and
# (where none runs) munged; stops what it started.
#
#   contrib/slurm/test-single-node.sh                 # the ledger test
#   contrib/slurm/test-single-node.sh --measure 30    # then 30 link probes with and without Links=
#
# Environment: PYTHON (an interpreter with gpuallocd and gpulease, default python3),
# HOOK_PYTHON (runs the prolog and epilog, also as the job's user, with gpulease from this
# tree's client/; default /usr/bin/python3),
# TOPOLOGY (default example:dgx1-volta), JOB_USER (default nobody).
set -euo pipefail

PROBES=0
[ "${1:-}" = "--measure" ] && PROBES=${2:-30}
PYTHON=${PYTHON:-python3}
HOOK_PYTHON=${HOOK_PYTHON:-/usr/bin/python3}
TOPOLOGY=${TOPOLOGY:-example:dgx1-volta}
JOB_USER=${JOB_USER:-nobody}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
WORK=$(mktemp -d /tmp/ga-slurm.XXXXXX)
chmod 755 "$WORK"
SOCK=$WORK/gpuallocd.sock
NODE=$(hostname -s)
PIDS=()

say() { echo "== $*" >&2; }
fail() { echo "FAIL: $*" >&2; exit 1; }
show_logs() { [ ! -s "$WORK/hooks.log" ] || { say "prolog and epilog said:"; cat "$WORK/hooks.log" >&2; }; }
ctl() { "$PYTHON" -m gpuallocd.cli --socket "$SOCK" --json "$@"; }

cleanup() {
    local pid
    show_logs
    touch "$WORK/job/release" 2>/dev/null || true
    if [ -n "${SLURMCTLD:-}" ]; then
        squeue -h -o %i 2>/dev/null | xargs -r scancel 2>/dev/null || true
        wait_for 30 "jobs to end" no_jobs || true
    fi
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    if [ -n "${KEEP:-}" ]; then echo "kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

# wait_for SECONDS DESCRIPTION COMMAND...: run COMMAND every 0.2 s until it succeeds.
wait_for() {
    local limit=$1 what=$2; shift 2
    local deadline=$((SECONDS + limit))
    until "$@" >/dev/null 2>&1; do
        [ $SECONDS -lt $deadline ] || { echo "FAIL: timed out waiting for $what" >&2; return 1; }
        sleep 0.2
    done
}

for tool in slurmctld slurmd munged srun sinfo scontrol; do
    command -v "$tool" >/dev/null || fail "$tool is not installed"
done
[ "$(id -u)" = 0 ] || fail "must run as root (slurmd and the prolog run as root)"

start_munge() {
    if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then return; fi
    say "starting munged"
    install -d -o munge -g munge -m 755 /run/munge
    [ -s /etc/munge/munge.key ] || { mungekey --create 2>/dev/null || create-munge-key; }
    chown munge:munge /etc/munge/munge.key
    runuser -u munge -- munged --foreground &
    PIDS+=($!)
    wait_for 10 munged sh -c 'munge -n | unmunge'
}

start_gpuallocd() {
    say "starting gpuallocd on $TOPOLOGY"
    "$PYTHON" -m gpuallocd --socket "$SOCK" --state-dir "$WORK/state" \
        --inventory "$TOPOLOGY" >"$WORK/gpuallocd.log" 2>&1 &
    PIDS+=($!)
    wait_for 20 gpuallocd ctl status
}

write_hooks() {
    local hook
    for hook in prolog epilog; do
        cat >"$WORK/$hook" <<EOF
#!/bin/sh
export GPUALLOCD_SOCKET=$SOCK GPUALLOCD_SLURM_PYTHON=$HOOK_PYTHON GPUALLOCD_SLURM_DEFAULTS=/dev/null
export PYTHONPATH=$REPO/client
exec $HERE/$hook.sh 2>>$WORK/hooks.log
EOF
        chmod 755 "$WORK/$hook"
    done
}

# write_gres [--no-links]: gres.conf for the daemon's GPUs, on fake device files.
write_gres() {
    mkdir -p "$WORK/dev"
    local i  # character devices of the NVIDIA major: Slurm insists; nothing can open them
    for i in $(seq 0 $((GPUS - 1))); do
        [ -e "$WORK/dev/nvidia$i" ] || mknod "$WORK/dev/nvidia$i" c 195 "$i"
    done
    "$PYTHON" -m gpuallocd.cli --socket "$SOCK" slurm-gres \
        --file-pattern "$WORK/dev/nvidia{index}" "$@" >"$WORK/gres.conf"
}

write_slurm_conf() {
    mkdir -p "$WORK/spool" "$WORK/state-slurm"
    cat >"$WORK/slurm.conf" <<EOF
ClusterName=gpuallocd-test
SlurmctldHost=$NODE
SlurmctldPort=16817
SlurmdPort=16818
SlurmUser=root
AuthType=auth/munge
StateSaveLocation=$WORK/state-slurm
SlurmdSpoolDir=$WORK/spool
SlurmctldPidFile=$WORK/slurmctld.pid
SlurmdPidFile=$WORK/slurmd.pid
SlurmctldLogFile=$WORK/slurmctld.log
SlurmdLogFile=$WORK/slurmd.log
SlurmdDebug=verbose
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
SchedulerType=sched/builtin
ReturnToService=2
GresTypes=gpu
Prolog=$WORK/prolog
Epilog=$WORK/epilog
PrologFlags=Alloc
MpiDefault=none
NodeName=$NODE CPUs=16 Sockets=2 CoresPerSocket=8 ThreadsPerCore=1 RealMemory=1000 Gres=gpu:$GPUS State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
}

no_jobs() { [ -z "$(squeue -h -o %i)" ]; }
node_idle() { sinfo -h -n "$NODE" -o %t | grep -qx idle; }

start_slurm() {
    say "starting slurmctld and slurmd"
    export SLURM_CONF=$WORK/slurm.conf
    slurmctld -D -i -f "$SLURM_CONF" >>"$WORK/slurmctld.out" 2>&1 &
    SLURMCTLD=$!
    slurmd -D -f "$SLURM_CONF" >>"$WORK/slurmd.out" 2>&1 &
    SLURMD=$!
    PIDS+=("$SLURMCTLD" "$SLURMD")
    wait_for 60 "the node to be idle" node_idle
}

stop_slurm() {  # gres.conf is read when the daemons start
    kill "$SLURMD" "$SLURMCTLD"
    wait "$SLURMD" "$SLURMCTLD" || true
}

lease_of_job() {  # lease_of_job JOBID: the active lease labelled slurm:JOBID, as JSON
    ctl leases | "$PYTHON" -c '
import json, sys
found = [l for l in json.load(sys.stdin)["leases"] if l["label"] == "slurm:" + sys.argv[1]]
sys.exit(1) if not found else print(json.dumps(found[0]))' "$1"
}

no_lease_of_job() { ! lease_of_job "$1"; }

check_job() {
    say "running srun --gres=gpu:2 as $JOB_USER"
    local job_uid env_file=$WORK/job/env release=$WORK/job/release
    job_uid=$(id -u "$JOB_USER")
    install -d -o "$JOB_USER" -m 755 "$WORK/job"
    runuser -u "$JOB_USER" -- srun --chdir=/tmp --gres=gpu:2 --time=5 -J ledger-check \
        sh -c "env | grep -E '^(SLURM_JOB_ID|SLURM_STEP_GPUS|SLURM_JOB_GPUS|CUDA_VISIBLE_DEVICES)=' >$env_file.tmp
               mv $env_file.tmp $env_file
               while [ ! -e $release ]; do sleep 0.2; done" &
    local srun_pid=$!
    wait_for 60 "the job to start" test -s "$env_file"
    local job_id
    job_id=$(sed -n 's/^SLURM_JOB_ID=//p' "$env_file")
    say "job $job_id runs; its environment:"; cat "$env_file" >&2
    wait_for 20 "lease slurm:$job_id" lease_of_job "$job_id"
    local lease
    lease=$(lease_of_job "$job_id")
    say "ledger while it runs: $lease"
    "$PYTHON" - "$lease" "$job_uid" "$env_file" <<'EOF' || fail "the lease does not match the job"
import json, sys
lease, uid, env_file = json.loads(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
env = dict(line.strip().split("=", 1) for line in open(env_file))
slurm_ids = sorted(int(i) for i in env["CUDA_VISIBLE_DEVICES"].split(","))
assert lease["owner"]["uid"] == uid, (lease["owner"], uid)
assert sorted(g["index"] for g in lease["gpus"]) == slurm_ids, (lease["gpus"], slurm_ids)
assert lease["state"] == "active"
EOF
    touch "$release"
    wait "$srun_pid" || fail "srun failed"
    wait_for 30 "the epilog to free lease slurm:$job_id" no_lease_of_job "$job_id"
    local lease_id state
    lease_id=$("$PYTHON" -c 'import json,sys; print(json.loads(sys.argv[1])["id"])' "$lease")
    state=$(ctl history --lease "$lease_id" | "$PYTHON" -c 'import json,sys; print(",".join(e["event"] for e in json.load(sys.stdin)["events"]))')
    say "ledger after: lease $lease_id history $state"
    [ "$state" = "granted,freed" ] || fail "expected granted,freed, got $state"
    wait_for 30 "the job to leave the queue" no_jobs
    say "PASS: job $job_id: its GPUs leased for uid $job_uid while it ran, freed after"
}

measure() {
    local mode
    for mode in links no-links; do
        local flags=()
        [ $mode = no-links ] && flags=(--no-links)
        stop_slurm
        write_gres "${flags[@]}"
        start_slurm
        say "$PROBES probes, gres.conf $mode"
        "$PYTHON" "$HERE/probe_links.py" --socket "$SOCK" --probes "$PROBES" --label "$mode" \
            --gres-conf "$WORK/gres.conf"
    done
}

start_munge
start_gpuallocd
GPUS=$(ctl status | "$PYTHON" -c 'import json,sys; print(len(json.load(sys.stdin)["gpus"]))')
write_hooks
write_gres
write_slurm_conf
start_slurm
check_job
[ "$PROBES" -gt 0 ] && measure
exit 0
