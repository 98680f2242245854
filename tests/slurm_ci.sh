#!/usr/bin/env bash
# A real one-node SLURM cluster on this machine, and the workflow run through `--profile profiles/slurm`.
#
# Starts munged, slurmctld and slurmd from a temporary folder (their config, state, spool, logs and
# sockets all live there; /etc is not touched), waits until the node is idle, runs
# tests/workflow/test_slurm.py against it, and stops every daemon it started by its PID, pass or fail.
# No accounting database: the executor plugin is told to poll `squeue`, which sees finished jobs
# for MinJobAge (1 h here). The node declares 4 GPUs (a GRES on stand-in device files), 64 CPUs and
# 256 GB (SlurmdParameters=config_overrides: slurm.conf's sizes, not the detected ones), so that the
# profile's per-rule requests (train: 4 GPUs x 8 CPUs, 128 GB, ...) are submitted and granted as they
# are; nothing is enforced (task/none, no cgroups) and the jobs run on the CPU (device: cpu).
# Needs root (Debian 12); installs slurm-wlm and munge when missing.
# Usage: bash tests/slurm_ci.sh [PYTEST ARGS]   (VENV=... picks the virtualenv, default .venv; exit
# status is pytest's). SLURM_CI_COMMAND="..." runs that command instead of pytest (a benchmark).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" HF_HUB_OFFLINE=1
start=$(date +%s)

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null
fi
if ! "$VENV/bin/python" -c "import snakemake_executor_plugin_slurm" 2>/dev/null; then
    "$VENV/bin/python" -m pip install --quiet -c "$ROOT/constraints.txt" -e "$ROOT[slurm]"
fi

DIR="$(mktemp -d /tmp/rewardloop-slurm.XXXXXX)"
DEFAULT_CONF=/etc/slurm/slurm.conf
chmod 755 "$DIR"
PIDS=()
stop_cluster() {
    local status=$?
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
    done
    if [ "$status" -ne 0 ]; then
        for log in "$DIR"/*.log "$DIR"/munge-key/*.log; do echo "== $log"; tail -n 30 "$log"; done
    fi
    [ "$(readlink "$DEFAULT_CONF" 2>/dev/null)" = "$DIR/slurm.conf" ] && rm -f "$DEFAULT_CONF"
    rm -rf "$DIR"
    echo "slurm tier: $(( $(date +%s) - start )) s in all"
    exit "$status"
}
trap stop_cluster EXIT

# munge: its own key, socket and pid file, run as the munge user (it refuses loose permissions).
# (the key folder is private, the socket folder must be reachable by everyone).
mkdir -p "$DIR/munge" "$DIR/munge-key"
dd if=/dev/urandom of="$DIR/munge-key/munge.key" bs=1024 count=1 status=none
chown -R munge:munge "$DIR/munge" "$DIR/munge-key"
chmod 755 "$DIR/munge" && chmod 700 "$DIR/munge-key" && chmod 400 "$DIR/munge-key/munge.key"
runuser -u munge -- munged --socket="$DIR/munge/munge.socket" --key-file="$DIR/munge-key/munge.key" \
    --pid-file="$DIR/munge-key/munged.pid" --log-file="$DIR/munge-key/munged.log" \
    --seed-file="$DIR/munge-key/munged.seed"
PIDS+=("$(cat "$DIR/munge-key/munged.pid")")

HOST="$(hostname -s)"
mkdir -p "$DIR/state" "$DIR/spool"
# The GPUs' "device files": /dev/null's device numbers (a plain file where mknod is not allowed: slurmd
# then logs that it is no device, and counts it all the same). A GPU GRES without File counts 0.
# gres.conf is read from the folder of slurm.conf.
mkdir -p "$DIR/gpus"
for i in 0 1 2 3; do mknod "$DIR/gpus/nvidia$i" c 1 3 2>/dev/null || : >"$DIR/gpus/nvidia$i"; done
cat >"$DIR/gres.conf" <<EOF
AutoDetect=off
NodeName=$HOST Name=gpu File=$DIR/gpus/nvidia[0-3]
EOF
cat >"$DIR/slurm.conf" <<EOF
ClusterName=rewardloop-ci
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=16817
SlurmdPort=16818
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
JobAcctGatherType=jobacct_gather/none
GresTypes=gpu
SlurmdParameters=config_overrides
AccountingStorageType=accounting_storage/none
# squeue keeps finished jobs for an hour: the executor plugin polls it, and the test reads it.
MinJobAge=3600
ReturnToService=2
MpiDefault=none
SchedulerType=sched/backfill
NodeName=$HOST CPUs=64 Boards=1 SocketsPerBoard=1 CoresPerSocket=64 ThreadsPerCore=1 RealMemory=262144 Gres=gpu:4 NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=ci Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF="$DIR/slurm.conf"
# The executor's job steps run `srun` with every SLURM_* variable removed (SLURM_CONF included,
# snakemake-executor-plugin-slurm-jobstep 0.6.1), so srun reads the default path: link it there for
# the tier's lifetime, unless a real config already lives there.
# A link into another tier's folder whose slurmctld is gone was left by a killed run (its EXIT trap
# never ran): take it over. A live tier or a real config stops this one.
stale_tier_link() {
    local target old_dir pid
    target="$(readlink "$DEFAULT_CONF" 2>/dev/null)" || return 1
    old_dir="$(dirname "$target")"
    case "$old_dir" in /tmp/rewardloop-slurm.*) ;; *) return 1 ;; esac
    pid="$(cat "$old_dir/slurmctld.pid" 2>/dev/null || true)"
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" != slurmctld ]
}
if stale_tier_link; then
    echo "removing $DEFAULT_CONF -> $(readlink "$DEFAULT_CONF"), left by a killed run of this tier"
    rm -f "$DEFAULT_CONF"
fi
if [ -e "$DEFAULT_CONF" ] || [ -L "$DEFAULT_CONF" ]; then
    echo "$DEFAULT_CONF exists: not starting a test cluster over a configured SLURM"; exit 1
fi
mkdir -p /etc/slurm && ln -s "$SLURM_CONF" "$DEFAULT_CONF"
slurmctld -D -i >"$DIR/slurmctld.out.log" 2>&1 &
PIDS+=("$!")
slurmd -D >"$DIR/slurmd.out.log" 2>&1 &
PIDS+=("$!")
for _ in $(seq 120); do
    state="$(sinfo -h -N -o %t 2>/dev/null || true)"
    [ "$state" = "idle" ] && break
    sleep 0.5
done
[ "$state" = "idle" ] || { echo "slurm node never became idle (sinfo: '$state')"; exit 1; }
echo "slurm cluster up in $(( $(date +%s) - start )) s: $SLURM_CONF"

cd "$ROOT"
if [ -n "${SLURM_CI_COMMAND:-}" ]; then  # another command with the cluster up (bench/bench_slurm_groups.py)
    REWARDLOOP_SLURM=1 PATH="$VENV/bin:$PATH" bash -c "$SLURM_CI_COMMAND"
    exit
fi
REWARDLOOP_SLURM=1 PATH="$VENV/bin:$PATH" "$VENV/bin/python" -m pytest -q -p no:cacheprovider --durations=3 tests/workflow/test_slurm.py "$@"
