echo 2 > /proc/sys/kernel/numa_balancing
P=/sys/fs/cgroup/ntc
echo +memory > /sys/fs/cgroup/cgroup.subtree_control || exit 1
mkdir -p $P || exit 1
echo +memory > $P/cgroup.subtree_control || exit 1
mkdir -p $P/hot $P/cold $P/churn || exit 1
snap() { for c in "" /hot /cold /churn; do echo "== ntc$c"; cat $P$c/memory.stat; done > "$RESULTS/$1"; }
# Each workload moves itself into its cgroup before it allocates, so its
# pages are charged there: memory.stat counts by the folio's memcg,
# numatrace by the faulting task's cgroup. One busy, one nearly idle, one
# starting a process a second.
cat > /tmp/cgroups-run.sh <<'EOS'
P=/sys/fs/cgroup/ntc
W='numatrace workload hot-chunks --summary /dev/null'
sh -c "echo \$\$ > $P/hot/cgroup.procs && exec $W --slow-mb 48 --chunk-mb 8 --accesses 4000 --duration 6" &
sh -c "echo \$\$ > $P/cold/cgroup.procs && exec $W --slow-mb 32 --chunk-mb 32 --accesses 200 --idle-ms 1000 --duration 6" &
sh -c "echo \$\$ > $P/churn/cgroup.procs && for i in 1 2 3 4 5 6; do $W --slow-mb 8 --chunk-mb 8 --accesses 2000 --duration 1 || exit 1; done" &
wait
EOS
snap memstat-before.txt
numatrace stats --live --by cgroup --json --record /tmp/cgroups.trace --overwrite -- sh /tmp/cgroups-run.sh > "$RESULTS/stats.json" || exit 1
snap memstat-after.txt
numatrace stats /tmp/cgroups.trace --by cgroup > "$RESULTS/stats.txt" || exit 1
numatrace hist --from /tmp/cgroups.trace --by cgroup --json > "$RESULTS/hist.json" || exit 1
numatrace export --replay /tmp/cgroups.trace --speed 0 --per-cgroup 2 --textfile "$RESULTS/cgroups.prom" --interval 1 || exit 1
rm -f /tmp/cgroups.trace /tmp/cgroups-run.sh
