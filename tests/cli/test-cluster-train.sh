#!/usr/bin/env bash
# test-cluster-train.sh - a real multi-host Slurm cluster made of network
# namespaces (scripts/cluster-local.sh: three hosts cn1..cn3, each with its
# own hostname, address and slurmd, a controller/login host ctl, one bridge)
# in this test's temp folder, brought down by the EXIT trap even after a
# failure:
#   - up/status: distinct hostnames and addresses, slurmctld bound to the
#     cluster's address, every node idle; `srun -N 3 hostname` prints three
#     names;
#   - `primus slurm srun -N3 -n3 -- train pretrain`, run on the login host,
#     trains one data-parallel rank on each host (OpenMPI over TCP between
#     the namespaces, srun --mpi=pmix) and ends with the losses and the bytes
#     of `primus direct --nproc 3` (mpirun on one host); -N2 -n4 (two ranks
#     a host) likewise against --nproc 4;
#   - down stops every process by its pid and deletes the bridge, is
#     idempotent, and a failed `up` leaves nothing behind.
# Exit 77 (skipped) when the machine cannot make namespaces or bridges (not
# root) or Slurm/munge are missing; PRIMUS_REQUIRE_SLURM=1 makes that a
# failure.
source "$(dirname "$0")/lib.sh"
# Every byte between ranks goes over TCP, also between ranks of one host.
export OMPI_MCA_btl=tcp,self
start=$SECONDS
cluster_up_or_skip 3
expect_in "up prints SLURM_CONF" "export SLURM_CONF=$C/etc/slurm.conf" "$UP"
ok "cluster of 3 hosts up in $((SECONDS - start)) s"
NET=$(cat "$C/run/subnet")
BR=$(cat "$C/run/bridge")
ST=$("$CL" status "$C" 2>&1)
for k in 1 2 3; do
  expect_in "status: cn$k has its own hostname and address" "cn$k: namespace held by pid" "$ST"
  expect_in "status: cn$k's address" "cn$k, $NET.$k/24" "$ST"
  expect_in "status: slurmd on cn$k" "slurmd-cn$k: running" "$ST"
  expect_in "status: cn$k idle" "cn$k low* idle" "$ST"
done
expect_eq "hostnames as the hosts see them" "$(for h in ctl cn1 cn2 cn3; do "$CL" exec "$C" "$h" -- hostname; done | tr '\n' ' ')" "ctl cn1 cn2 cn3 "
expect_eq "the machine's own hostname is untouched" "$(hostname)" "$(cat /proc/sys/kernel/hostname)"
LISTEN=$(cx ss -Hltnp 2>/dev/null | grep '"slurmctld"' || true)
expect_in "slurmctld listens on the cluster's address" "$NET.254:6817" "$LISTEN"
expect_not_in "slurmctld does not listen on all addresses" "0.0.0.0:6817" "$LISTEN"
expect_eq "the host sees no daemon of the cluster listening" "$(ss -Hltnp 2>/dev/null | grep -cE ':(6817|6818) ')" 0
expect_eq "only loopback and eth0 inside a host" "$("$CL" exec "$C" cn2 -- ip -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | sort | tr '\n' ' ')" "eth0 lo "
expect_eq "the bridge has no address" "$(ip -o -4 addr show dev "$BR" 2>/dev/null | wc -l)" 0

OUT=$(cx timeout 60 srun -N 3 hostname 2>&1)
expect_eq "srun -N 3 hostname: three names" "$(sort <<<"$OUT" | tr '\n' ' ')" "cn1 cn2 cn3 "

# ---- training across hosts against mpirun on one host ----
small_corpus corpus.txt
exp() { tiny_exp "$1" "micro_batch_size: 1" "global_batch_size: 12" "save: $T/ck-$1" "save_interval: 8"; }
final() { echo "$T/ck-$1/iter_0000008/model.safetensors"; }
same_run() { # LABEL REF NAME
  expect_eq "$1: 8 steps" "$(run_losses "$3" | wc -l)" 8
  expect_eq "$1: same losses as mpirun on one host" "$(run_losses "$3" | tr '\n' ' ')" "$(run_losses "$2" | tr '\n' ' ')"
  if cmp -s "$(final "$2")" "$(final "$3")"; then ok "$1: weights byte-identical to mpirun's"
  else bad "$1: weights differ: $(cmp "$(final "$2")" "$(final "$3")" 2>&1)"; fi
}
# Under the sanitizers (minutes there) only the 3-host run: -N2 -n4 is left
# to the plain build.
SAN=
[[ -n ${ASAN_OPTIONS:-}${UBSAN_OPTIONS:-} ]] && SAN=1
for n in 3 ${SAN:-4}; do
  exp "mp$n"
  run direct --nproc "$n" -- train pretrain --config "mp$n.yaml"
  expect_rc "mpirun reference, $n ranks on one host" 0
done
exp h3
t0=$SECONDS
crun slurm srun -N3 -n3 -- train pretrain --config h3.yaml
expect_rc "slurm srun -N3 -n3 from the login host ($((SECONDS - t0)) s)" 0
expect_in "srun asked for PMIx" "srun -N3 -n3 --mpi=pmix " "$ERR"
for k in 0 1 2; do expect_in "rank $k ran on cn$((k + 1))" "[rank $k/3 cn$((k + 1))]" "$(cat "$(newest_run h3)/logs/rank-$k.log" 2>/dev/null)"; done
expect_in "data parallel over 3 ranks" "data parallel: 3 ranks" "$ERR"
same_run "3 hosts" mp3 h3
if [[ -z $SAN ]]; then
  exp h2
  crun slurm srun -N2 -n4 -- train pretrain --config h2.yaml
  expect_rc "slurm srun -N2 -n4 (two ranks a host)" 0
  expect_in "rank 1 on cn1" "[rank 1/4 cn1]" "$(cat "$(newest_run h2)/logs/rank-1.log" 2>/dev/null)"
  expect_in "rank 2 on cn2" "[rank 2/4 cn2]" "$(cat "$(newest_run h2)/logs/rank-2.log" 2>/dev/null)"
  same_run "2 hosts x 2 ranks" mp4 h2
else
  echo "# sanitizers: the -N2 -n4 run is left to the plain build"
fi

# ---- down ----
PIDS="$(cat "$C"/run/*.pid 2>/dev/null | tr '\n' ' ')"
"$CL" down "$C" >/dev/null 2>&1
expect_eq "down" "$?" 0
left=""
for p in $PIDS; do kill -0 "$p" 2>/dev/null && left+="$p "; done
expect_eq "no process left (pids $PIDS)" "$left" ""
expect_eq "bridge and veth ends deleted" "$(ip -o link show 2>/dev/null | grep -c "$BR")" 0
"$CL" status "$C" >/dev/null 2>&1
expect_eq "status after down: exit 3" "$?" 3
"$CL" down "$C" >/dev/null 2>&1
expect_eq "down again is a no-op" "$?" 0
# A failed up (no time to become idle) cleans after itself.
OUT=$(CLUSTER_LOCAL_TIMEOUT=0 "$CL" up "$T/c2" --hosts 2 2>&1)
expect_eq "up that fails: exit 3" "$?" 3
expect_in "it says why" "nodes not idle after 0s" "$OUT"
expect_eq "nothing left after the failed up" "$(ls "$T/c2/run" | grep -c pid)" 0
BR2=$(sed -n 's/.*deleted bridge \(prmc[0-9]*\).*/\1/p' <<<"$OUT")
if [[ -n $BR2 ]] && ! ip link show "$BR2" >/dev/null 2>&1; then ok "the failed up deleted its bridge $BR2"
else bad "bridge of the failed up: '$BR2': $OUT"; fi
OUT=$("$CL" up "$T/c2" --hosts 0 2>&1)
expect_eq "--hosts 0: usage error" "$?" 2
ok "whole test in $((SECONDS - start)) s"
finish
