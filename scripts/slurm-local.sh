#!/usr/bin/env bash
# slurm-local.sh — a one-node Slurm cluster on this machine, for reduce's
# tests of --launcher slurm.
#
#   scripts/slurm-local.sh start    install slurm-wlm and munge when missing,
#                                   start munged, slurmctld and slurmd, wait
#                                   until the node is idle, print SLURM_CONF
#   scripts/slurm-local.sh stop     stop them again (by their pids)
#   scripts/slurm-local.sh status   sinfo and squeue, or "not running"
#   scripts/slurm-local.sh env      print the export line for the clients
#
# Everything lives under $REDUCE_SLURM_DIR (default /tmp/reduce-slurm-local):
# slurm.conf, the munge key and socket, the spool and state directories,
# the logs and the pid files. Nothing under /etc is touched, and a munged or
# Slurm already running on the machine is left alone: the clients find this
# cluster through SLURM_CONF, and it uses ports of its own.
#
# Needs root (the daemons run as root: SlurmUser=root) and, when the
# packages are missing, apt-get (Debian/Ubuntu). There is no cgroup setup:
# ProctrackType=proctrack/linuxproc and TaskPlugin=task/none work in a
# container without systemd or a writable cgroup tree.
set -euo pipefail

DIR=${REDUCE_SLURM_DIR:-/tmp/reduce-slurm-local}
CONF=$DIR/slurm.conf
CTLD_PORT=${REDUCE_SLURM_CTLD_PORT:-16817}
SLURMD_PORT=${REDUCE_SLURM_SLURMD_PORT:-16818}
# CPUs the node offers: at least 4, so that -j 2 (or 4) steps run at once
# even on a 2-core machine (config_overrides lets slurmd accept more CPUs
# than it counts).
CPUS=$(nproc)
[ "$CPUS" -ge 4 ] || CPUS=4
NODE=$(hostname -s)

log() { echo "slurm-local: $*" >&2; }
die() { log "$*"; exit 1; }

need_root() {
	[ "$(id -u)" = 0 ] || die "must run as root (the daemons run as root)"
}

install_packages() {
	if command -v slurmctld >/dev/null && command -v slurmd >/dev/null &&
		command -v srun >/dev/null && command -v munged >/dev/null; then
		return
	fi
	command -v apt-get >/dev/null || die "slurm-wlm or munge is missing and there is no apt-get to install them"
	log "installing slurm-wlm and munge"
	apt-get update -q >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends slurm-wlm munge >&2
}

# pidof_file prints the pid in file $1 when that process still runs.
pidof_file() {
	local p
	[ -s "$1" ] || return 1
	p=$(cat "$1")
	kill -0 "$p" 2>/dev/null || return 1
	echo "$p"
}

write_conf() {
	mkdir -p "$DIR/state" "$DIR/spool" "$DIR/munge"
	# munged wants its socket's directory searchable by everyone (clients
	# of other users) and the key readable by root alone.
	chmod 755 "$DIR" "$DIR/munge"
	cat >"$CONF" <<EOF
# Written by scripts/slurm-local.sh: a one-node cluster for reduce's tests.
ClusterName=reduce-local
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge/munge.socket
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups: they need systemd or a writable cgroup tree, which a CI
# container may not have.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
LaunchParameters=use_interactive_step
# Schedule a job the moment it is submitted or a CPU frees up: a replay
# takes tens of milliseconds, and Slurm's default delays (batch_sched_delay
# 3 s) would dominate.
SchedulerType=sched/builtin
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
# Quick turnaround: the tests cancel jobs and want them gone at once.
KillWait=2
MinJobAge=60
MessageTimeout=10
SlurmdTimeout=30
InactiveLimit=0
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
	# Slurm 22.05 loads a cgroup plugin in slurmd whatever the other
	# plugins are; autodetect picks v1 or v2 as the machine has it, and
	# with the plugins above it creates no cgroup for a job.
	echo "CgroupPlugin=autodetect" >"$DIR/cgroup.conf"
}

start_munge() {
	if pidof_file "$DIR/munge/munged.pid" >/dev/null; then
		return
	fi
	if [ ! -s "$DIR/munge/munge.key" ]; then
		if command -v mungekey >/dev/null; then
			mungekey --create --keyfile="$DIR/munge/munge.key" --force >&2
		else
			dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
		fi
		chmod 600 "$DIR/munge/munge.key"
	fi
	munged --force \
		--key-file="$DIR/munge/munge.key" \
		--socket="$DIR/munge/munge.socket" \
		--pid-file="$DIR/munge/munged.pid" \
		--log-file="$DIR/munge/munged.log" \
		--seed-file="$DIR/munge/munged.seed"
	for _ in $(seq 50); do
		[ -S "$DIR/munge/munge.socket" ] && return
		sleep 0.1
	done
	die "munged did not start (see $DIR/munge/munged.log)"
}

start() {
	need_root
	install_packages
	if pidof_file "$DIR/slurmctld.pid" >/dev/null && pidof_file "$DIR/slurmd.pid" >/dev/null; then
		log "already running ($CONF)"
	else
		stop_daemons quiet
		write_conf
		start_munge
		export SLURM_CONF=$CONF
		# -c: a clean state (no jobs from an earlier run); -i: ignore
		# state files that do not match.
		slurmctld -c -i -f "$CONF"
		slurmd -f "$CONF" -N "$NODE"
	fi
	export SLURM_CONF=$CONF
	local state=""
	for _ in $(seq 300); do
		state=$(sinfo -h -n "$NODE" -o %T 2>/dev/null || true)
		case $state in
		idle | idle~ | mixed | allocated) break ;;
		down* | drain* | fail*)
			# A node that came back after a restart may be marked down.
			scontrol update NodeName="$NODE" State=RESUME >/dev/null 2>&1 || true
			;;
		esac
		sleep 0.2
	done
	case $state in
	idle | idle~ | mixed | allocated) ;;
	*)
		log "node $NODE is ${state:-not known} after 60 s; logs:"
		tail -n 20 "$DIR/slurmctld.log" "$DIR/slurmd.log" >&2 || true
		stop_daemons quiet
		exit 1
		;;
	esac
	log "node $NODE is $state: $CPUS CPUs, partition debug (SLURM_CONF=$CONF)"
	echo "export SLURM_CONF=$CONF"
}

# stop_daemons stops slurmd, slurmctld and munged by the pids in their pid
# files, SIGTERM first, then SIGKILL after 10 s.
stop_daemons() {
	local quiet=${1:-} f p
	for f in "$DIR/slurmd.pid" "$DIR/slurmctld.pid" "$DIR/munge/munged.pid"; do
		p=$(pidof_file "$f") || continue
		[ -n "$quiet" ] || log "stopping $(basename "$f" .pid) (pid $p)"
		kill -TERM "$p" 2>/dev/null || true
		for _ in $(seq 100); do
			kill -0 "$p" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$p" 2>/dev/null || true
		rm -f "$f"
	done
}

stop() {
	if [ -f "$CONF" ] && pidof_file "$DIR/slurmctld.pid" >/dev/null; then
		# Cancel what is left, so that no step outlives the cluster.
		SLURM_CONF=$CONF scancel --quiet --partition=debug 2>/dev/null || true
	fi
	stop_daemons
	log "stopped"
}

status() {
	if ! pidof_file "$DIR/slurmctld.pid" >/dev/null; then
		echo "not running"
		return 1
	fi
	export SLURM_CONF=$CONF
	sinfo
	squeue
}

case ${1:-} in
start) start ;;
stop) stop ;;
status) status ;;
env) echo "export SLURM_CONF=$CONF" ;;
*)
	echo "usage: $0 start|stop|status|env" >&2
	exit 2
	;;
esac
