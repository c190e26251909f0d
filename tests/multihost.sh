#!/usr/bin/env bash
# Two hosts over TCP: network namespaces node1 and node2 joined by a veth pair (10.99.0.1 and
# .2), each with its own hostname, and an rsh agent that starts Open MPI's daemon in the
# namespace of the address it is given (../shared/notes/cluster-testing.md). A 2-stage x
# 2-replica job is started with launch/fgpipe-run --hostfile (2 ranks per node: each node holds
# one whole pipeline, the replica sums cross the veth link) and must give bit for bit the
# weights of the same job on one host (shared memory), for bp and for fg+bp (the exact gradient
# c summed over the hosts with MPI_Iallreduce, the fg scalars over the grid); and out of core,
# 1 stage x 4 replicas, 2 per host: the replicas of a host share one store, one per host.
#
# Needs root (ip netns); skipped with the reason (exit 77) without it.
#
# usage: multihost.sh FGPIPE CONFIG
. "$(dirname "$0")/lib.sh" "$@"
root=$(cd "$(dirname "$0")/.." && pwd)
skip() { echo "******** multihost test SKIPPED: $* ********"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "network namespaces need root"
command -v ip >/dev/null && command -v unshare >/dev/null || skip "ip (iproute2) or unshare (util-linux) missing"

tag=fg$$  # namespace and link names of this run (veth names have at most 15 characters)
ns1=${tag}n1 ns2=${tag}n2
cleanup() {
  ip netns pids "$ns1" 2>/dev/null | xargs -r kill -KILL 2>/dev/null
  ip netns pids "$ns2" 2>/dev/null | xargs -r kill -KILL 2>/dev/null
  ip netns del "$ns1" 2>/dev/null  # deletes the veth pair with it
  ip netns del "$ns2" 2>/dev/null
  [ -n "${KEEP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT
show() { sed 's/^/#   /' "$@" | tail -n 25; }

# --- two hosts -----------------------------------------------------------------------------------
if ! ip netns add "$ns1" 2>"$dir/netns.err"; then skip "ip netns add failed: $(cat "$dir/netns.err")"; fi
ip netns add "$ns2" &&
  ip link add "${tag}a" netns "$ns1" type veth peer name "${tag}b" netns "$ns2" &&
  ip -n "$ns1" addr add 10.99.0.1/24 dev "${tag}a" && ip -n "$ns2" addr add 10.99.0.2/24 dev "${tag}b" &&
  ip -n "$ns1" link set lo up && ip -n "$ns2" link set lo up &&
  ip -n "$ns1" link set "${tag}a" up && ip -n "$ns2" link set "${tag}b" up
# No ping on a minimal system: a TCP connect to a closed port of node2 that node2 refuses
# proves the link (no route or no link would time out or fail otherwise).
reply=$(ip netns exec "$ns1" timeout 5 bash -c 'exec 3<>/dev/tcp/10.99.0.2/9' 2>&1)
verdict "two network namespaces joined by a veth pair (10.99.0.1 <-> 10.99.0.2)" \
  "$(grep -q "refused" <<<"$reply" || echo "node2 does not answer: $reply")"
[ "$failed" -eq 0 ] || finish

# The rsh agent: "ssh" to an address = run the command in that address's namespace, under its
# own hostname (Open MPI's shared-memory transport must not take two namespaces for one host).
cat >"$dir/nsrsh" <<EOF
#!/bin/sh
case \$1 in
  10.99.0.1|node1) ns=$ns1 n=1 ;;
  10.99.0.2|node2) ns=$ns2 n=2 ;;
  *) echo "nsrsh: unknown host \$1" >&2; exit 255 ;;
esac
shift
exec ip netns exec \$ns unshare --uts /bin/sh -c "hostname node\$n; \$*"
EOF
chmod +x "$dir/nsrsh"
printf '10.99.0.1 slots=2\n10.99.0.2 slots=2\n' >"$dir/hostfile"

sent=0
small=(--set model=784-64-32-10 --set warmup_steps=0 --set print_every=1000000 --set steps=30)
tcp="--mca plm_rsh_agent $dir/nsrsh --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include 10.99.0.0/24 --mca oob_tcp_if_include 10.99.0.0/24 --display-map"
for c in "bp|--set mode=bp" "fgbp|--set mode=fg+bp --set estimator=cv --set lag=1 --set select=2 --set optimizer=sgd --set lr=0.0001"; do
  IFS='|' read -r name sets <<<"$c"
  read -r -a sets <<<"$sets"
  # Across the two hosts, started from node1 with the launcher users run.
  timeout 180 ip netns exec "$ns1" unshare --uts /bin/sh -c 'hostname node1; exec "$@"' sh \
    "$root/launch/fgpipe-run" --fgpipe "$fgpipe" --stages 2 --replicas 2 --ranks-per-node 2 \
    --hostfile "$dir/hostfile" --mpi-args "$tcp" "$config" "${small[@]}" "${sets[@]}" \
    --save-params "$dir/$name-2hosts.bin" >"$dir/$name-2hosts.log" 2>&1
  rc=$?
  verdict "$name: 2 stages x 2 replicas on 2 hosts over TCP exits 0" "$([ $rc -eq 0 ] || echo "exit $rc")"
  [ $rc -eq 0 ] || show "$dir/$name-2hosts.log"
  # Each host got one pipeline: ranks 0-1 on 10.99.0.1, 2-3 on 10.99.0.2.
  # (Open MPI names the node it was started on by its hostname, the other by its address.)
  map=$(awk '/Data for node:/ { node = $4 } /Process rank:/ { for (i = 1; i < NF; i++) if ($i == "rank:") print node ":" $(i + 1) }' \
        "$dir/$name-2hosts.log" | sort -u -t: -k2n | tr '\n' ' ')
  verdict "$name: ranks placed one pipeline per host ($map)" \
    "$(grep -qE '^(node1|10\.99\.0\.1):0 (node1|10\.99\.0\.1):1 10\.99\.0\.2:2 10\.99\.0\.2:3 $' <<<"$map" || echo "map '$map'")"
  # And the replica sums went over the link: more bytes than the weights several times over.
  bytes=$(ip netns exec "$ns1" cat "/sys/class/net/${tag}a/statistics/tx_bytes")
  verdict "$name: $((bytes - sent)) bytes sent from node1 to node2 over the veth link" \
    "$([ $((bytes - sent)) -gt 1000000 ] || echo "too few for 30 sums of 200 KB")"
  sent=$bytes
  # The same job on one host.
  timeout 180 mpirun -np 4 --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 "$fgpipe" train \
    --config "$config" --set stages=2 --set replicas=2 "${small[@]}" "${sets[@]}" \
    --save-params "$dir/$name-1host.bin" >"$dir/$name-1host.log" 2>&1
  rc=$?
  [ $rc -eq 0 ] || show "$dir/$name-1host.log"
  cmp -s "$dir/$name-2hosts.bin" "$dir/$name-1host.bin"
  verdict "$name: weights on 2 hosts equal 1 host, bitwise" \
    "$([ $? -eq 0 ] || echo "differ: $(cmp "$dir/$name-2hosts.bin" "$dir/$name-1host.bin" 2>&1 | head -n 1)")"
done

# Out of core: 1 stage x 4 replicas, 2 per host. The two replicas on a host share their host's
# store (stage-0-17-node-<n>.h5, n = 0 and 1: one per host, none per replica; here both hosts
# see one weights dir), the gradient sums cross the link as above, and the weights equal the 4
# replicas in memory on one host.
# mem_runtime=0: the budgets here are the stage's own bytes (exact floors and slot counts), not
# the process's, whose measured runtime varies between processes (docs/out-of-core.md)
ooc=(--set model=784-512-512-512-512-512-512-512-512-10 --set warmup_steps=0 --set print_every=1000000
     --set steps=8 --set mode=bp --set schedule=1f1b --set mem_runtime=0)
mkdir -p "$dir/ooc.w"
timeout 180 ip netns exec "$ns1" unshare --uts /bin/sh -c 'hostname node1; exec "$@"' sh \
  "$root/launch/fgpipe-run" --fgpipe "$fgpipe" --stages 1 --replicas 4 --ranks-per-node 2 \
  --hostfile "$dir/hostfile" --mpi-args "$tcp" "$config" "${ooc[@]}" --mem-budget 20M \
  --weights-dir "$dir/ooc.w" --save-params "$dir/ooc-2hosts.bin" >"$dir/ooc-2hosts.log" 2>&1
rc=$?
[ $rc -eq 0 ] || show "$dir/ooc-2hosts.log"
timeout 180 mpirun -np 4 --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 "$fgpipe" train \
  --config "$config" --set stages=1 --set replicas=4 "${ooc[@]}" \
  --save-params "$dir/ooc-mem.bin" >"$dir/ooc-mem.log" 2>&1
stores=$(cd "$dir/ooc.w" && ls ./*.h5 | sed 's|^\./||' | tr '\n' ' ')
shared=$(grep -c "shared by the stage's 2 replicas on node [01]" "$dir/ooc-2hosts.log")
verdict "out of core, 1 stage x 4 replicas on 2 hosts: one store per host ($stores), the 4 in-memory replicas' weights bitwise" \
  "$([ $rc -eq 0 ] || echo "exit $rc")$([ "$stores" = "stage-0-17-node-0.h5 stage-0-17-node-1.h5 " ] || echo " stores: $stores")$([ "$shared" -eq 4 ] || echo " $shared of 4 ranks share a store")$(cmp -s "$dir/ooc-2hosts.bin" "$dir/ooc-mem.bin" || echo " weights differ")"
finish
